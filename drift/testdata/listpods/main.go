// Command listpods is the drift benchmark's baseline: a bare paginated List
// with client-go (500 per page, like drift) of every object drift reads in
// the benchmark — pods, Deployments and NetworkPolicies with the typed
// client, AdminNetworkPolicies and CiliumNetworkPolicies with the dynamic
// one — and nothing else. It prints how many objects it saw.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	proto := flag.Bool("protobuf", false, "ask for protobuf instead of JSON (typed objects)")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	// The same client-side rate limit as drift: client-go's default (5 QPS)
	// would make the baseline wait, not work.
	cfg.QPS, cfg.Burst = 50, 100
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	if *proto {
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	n := 0
	page := func(list func(metav1.ListOptions) (int, string, error)) {
		opts := metav1.ListOptions{Limit: 500}
		for {
			got, cont, err := list(opts)
			if err != nil {
				fail(err)
			}
			n += got
			if cont == "" {
				return
			}
			opts.Continue = cont
		}
	}
	page(func(o metav1.ListOptions) (int, string, error) {
		l, err := kube.CoreV1().Pods("").List(ctx, o)
		if err != nil {
			return 0, "", err
		}
		return len(l.Items), l.Continue, nil
	})
	page(func(o metav1.ListOptions) (int, string, error) {
		l, err := kube.AppsV1().Deployments("").List(ctx, o)
		if err != nil {
			return 0, "", err
		}
		return len(l.Items), l.Continue, nil
	})
	page(func(o metav1.ListOptions) (int, string, error) {
		l, err := kube.NetworkingV1().NetworkPolicies("").List(ctx, o)
		if err != nil {
			return 0, "", err
		}
		return len(l.Items), l.Continue, nil
	})
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "adminnetworkpolicies"},
		{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"},
	} {
		page(func(o metav1.ListOptions) (int, string, error) {
			l, err := dyn.Resource(gvr).List(ctx, o)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.GetContinue(), nil
		})
	}
	fmt.Println("listed", n)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
