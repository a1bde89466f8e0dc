package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Where hack/cluster keeps the test cluster's admin kubeconfig, and the
// lock its users take turns on.
const (
	ClusterKubeconfig = "/run/sandprobe-cluster/admin.kubeconfig"
	ClusterLock       = "/run/sandprobe-cluster.test-lock"
)

// Cluster gives the test the real single-node cluster of hack/cluster:
// it takes an exclusive lock on ClusterLock for the rest of the test (one
// user at a time on this machine, in any package or process), brings the
// cluster up when it does not answer, and returns the admin kubeconfig.
// The cluster stays up for the next test. A cluster that another checkout
// brought up (its hack/cluster differs from this one's) is rebuilt. A test that also needs the
// network lab calls Cluster first, then Lab, so two tests never wait on
// each other's lock.
//
// The lock's file descriptor is close-on-exec (os.OpenFile), so the
// daemons up.sh starts do not inherit it. A shell that locks with
// `exec 9>LOCK; flock 9` or `flock LOCK cmd` and starts the cluster must
// keep the descriptor from them (`hack/cluster/up.sh 9>&-`, `flock -o`):
// otherwise etcd, the kubelet and the rest hold the lock for as long as the
// cluster runs and every other user waits forever.
func Cluster(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	assets := KubeAssets(t)
	up := filepath.Join(ModuleRoot(t), "hack", "cluster", "up.sh")
	if _, err := os.Stat(up); err != nil {
		Missing(t, "hack/cluster/up.sh is missing")
	}
	lock, err := os.OpenFile(ClusterLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for the cluster lock", waited.Round(time.Second))
	}
	t.Cleanup(func() {
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		lock.Close()
	})
	stamp := filepath.Join(filepath.Dir(ClusterKubeconfig), "source-hash")
	if clusterReady(assets) && sameSource(stamp, "bash", up, "--print-source-hash") {
		return ClusterKubeconfig
	}
	t.Logf("bringing the test cluster up (hack/cluster/up.sh)")
	cmd := exec.Command("bash", up)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/cluster/up.sh: %v\n%s", err, out)
	}
	if !clusterReady(assets) {
		t.Fatalf("the test cluster came up but does not answer at %s", ClusterKubeconfig)
	}
	return ClusterKubeconfig
}

// clusterReady asks the API server whether it is ready and the node too.
func clusterReady(assets string) bool {
	if _, err := os.Stat(ClusterKubeconfig); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kubectl := filepath.Join(assets, "kubectl")
	if err := exec.CommandContext(ctx, kubectl, "--kubeconfig", ClusterKubeconfig, "get", "--raw", "/readyz").Run(); err != nil {
		return false
	}
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", ClusterKubeconfig, "get", "nodes",
		"-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`).Output()
	return err == nil && string(out) == "True\n"
}

// ClusterImage imports a rootfs (a directory, a tar or one static
// executable) into the test cluster's containerd as ref, with
// hack/cluster/import-image.sh. Pods must use it with imagePullPolicy
// Never: the cluster reaches no registry.
func ClusterImage(t testing.TB, ref, src string, entrypoint ...string) {
	t.Helper()
	script := filepath.Join(ModuleRoot(t), "hack", "cluster", "import-image.sh")
	out, err := exec.Command("bash", append([]string{script, ref, src}, entrypoint...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("import-image.sh %s: %v\n%s", ref, err, out)
	}
}
