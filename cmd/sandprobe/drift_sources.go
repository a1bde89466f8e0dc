package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/moby/moby/client"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/internal/kubeclient"
	"github.com/sandprobe/sandprobe/policy"
)

func (a *app) driftKube(ctx context.Context, o *driftOptions, engine *drift.Engine, col *drift.Collector, logger *slog.Logger) error {
	api, cfg, err := o.kubeAPI()
	if err != nil {
		return err
	}
	scan := &drift.KubeScan{API: api, Engine: engine, PageSize: o.pageSize, Source: "the cluster at " + cfg.Host, Logger: logger}
	return scan.Run(ctx, col)
}

// kubeAPI is the drift client of --kubeconfig and --context.
func (o *driftOptions) kubeAPI() (drift.KubeAPI, *rest.Config, error) {
	cfg, err := kubeclient.Config(o.kubeconfig, o.kubeContext)
	if err != nil {
		return nil, nil, err
	}
	// A handful of paged lists: client-side throttling would only add waits.
	cfg.QPS, cfg.Burst = 50, 100
	api, err := drift.NewKubeAPI(cfg)
	if err != nil {
		return nil, nil, err
	}
	return api, cfg, nil
}

func (a *app) driftDocker(ctx context.Context, o *driftOptions, engine *drift.Engine, col *drift.Collector) error {
	opts := []client.Opt{client.FromEnv}
	if o.dockerHost != "" {
		opts = append(opts, client.WithHost(o.dockerHost))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	// The engine here may be older (API 1.41): negotiate before anything else,
	// which also turns an unreachable daemon into one clear error.
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("reach docker engine %s: %w", cli.DaemonHost(), err)
	}
	return (&drift.DockerScan{API: cli, Engine: engine, Source: "the Docker engine at " + cli.DaemonHost()}).Run(ctx, col)
}

// readManifests reads every -f argument: files, directories (their .yaml,
// .yml and .json files, with recursive their subdirectories' too) and -
// for stdin.
func (a *app) readManifests(paths []string, namespace string, recursive bool) (*drift.Manifests, error) {
	m := &drift.Manifests{Namespace: namespace}
	for _, p := range paths {
		if p == "-" {
			if err := m.DecodeManifests(a.stdin, "stdin"); err != nil {
				return nil, err
			}
			continue
		}
		files, _, err := drift.ManifestFiles(p, recursive)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if err := decodeFile(m, f); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func decodeFile(m *drift.Manifests, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return m.DecodeManifests(f, path)
}

func readInput(stdin io.Reader, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(path)
}

// driftOffline checks the -f manifests and --inspect files; false means
// bad input, already said on stderr.
func (a *app) driftOffline(o *driftOptions, p *policy.Policy, newEngine func() *drift.Engine, col *drift.Collector) bool {
	if len(o.files) > 0 {
		scan := &drift.FileScan{Engine: newEngine(), Paths: o.files, Stdin: a.stdin, Namespace: o.namespace, NamespaceLabels: o.nsLabels, Recursive: o.recursive}
		if err := scan.Run(col); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe drift: %s\n", fileErr("-f", err))
			return false
		}
		if col.Scanned == 0 {
			// What was left unread may be where the sandboxes are: say it
			// on the same line (a tree given without -R reads nothing).
			unread := ""
			for _, n := range col.Notes {
				if strings.HasPrefix(n, "-f ") {
					unread += "; " + n
				}
			}
			fmt.Fprintf(a.stderr, "sandprobe drift: the files hold no sandbox (no Pod, workload, Sandbox or SandboxTemplate with labels %s) and no egress policy that selects one%s\n",
				drift.SelectorText(p), unread)
			return false
		}
	}
	for _, path := range o.inspect {
		data, err := readInput(a.stdin, path)
		if err == nil {
			err = drift.CheckInspectFile(newEngine(), data, path, col)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe drift: %s\n", fileErr("--inspect", err))
			return false
		}
	}
	return true
}
