// Command listpods is the drift benchmark's baseline: a bare paginated List
// of every pod with client-go's typed client (500 per page, like drift),
// nothing else. It prints how many pods it saw.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	proto := flag.Bool("protobuf", false, "ask for protobuf instead of JSON")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The same client-side rate limit as drift: client-go's default (5 QPS)
	// would make the baseline wait, not work.
	cfg.QPS, cfg.Burst = 50, 100
	if *proto {
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	n, opts := 0, metav1.ListOptions{Limit: 500}
	for {
		list, err := kube.CoreV1().Pods("").List(context.Background(), opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		n += len(list.Items)
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	fmt.Println("listed", n)
}
