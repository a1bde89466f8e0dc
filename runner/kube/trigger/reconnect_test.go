package trigger_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/runner/kube/trigger"
)

// cutProxy is a TCP proxy on loopback between the watch and the API
// server that the test can cut (every connection closed, new ones refused
// at once) and restore: the network breaking under a watch.
type cutProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	cut      bool
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		p.wg.Add(2)
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// through is cfg with its requests through the proxy.
func (p *cutProxy) through(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + p.ln.Addr().String()
	return c
}

// countLists is cfg counting its lists of networkpolicies: a LIST, or a
// watch that starts with the whole list (sendInitialEvents, client-go's
// streaming list); one at start, one more for each re-list.
func countLists(cfg *rest.Config) (*rest.Config, *atomic.Int32) {
	var n atomic.Int32
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			q := req.URL.Query()
			list := q.Get("watch") != "true" && q.Get("limit") != "1" // not the served-kind probe
			if strings.HasSuffix(req.URL.Path, "/networkpolicies") && (list || q.Get("sendInitialEvents") == "true") {
				n.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	return c, &n
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func upstreamOf(t *testing.T, cfg *rest.Config) string {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestWatchReconnect: the watch's connection is cut (every connection
// closed, new ones refused) for a while; what changed meanwhile still
// starts its cycle once the watch is back, and so does a change after.
func TestWatchReconnect(t *testing.T) {
	cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	namespace(t, cs, "rc-a")
	namespace(t, cs, "rc-b")
	proxy := newCutProxy(t, upstreamOf(t, cfg))
	r := start(t, cfg, proxy.through(cfg), []string{"rc-a", "rc-b"}, []trigger.Agent{}, 0)
	ctx := context.Background()
	if _, err := cs.NetworkingV1().NetworkPolicies("rc-a").Create(ctx, netpol("rc-a", "one"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("before the cut", "namespaces=rc-a")

	proxy.setCut(true)
	time.Sleep(2 * time.Second)
	if _, err := cs.NetworkingV1().NetworkPolicies("rc-b").Create(ctx, netpol("rc-b", "in-the-gap"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.NetworkingV1().NetworkPolicies("rc-a").Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got := r.seen(); len(got) != 1 {
		t.Fatalf("cycles %v while the watch was cut", got)
	}
	proxy.setCut(false)
	r.expect("the changes made while the watch was cut", "namespaces=rc-a,rc-b")

	if _, err := cs.NetworkingV1().NetworkPolicies("rc-b").Create(ctx, netpol("rc-b", "after"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("after the watch came back", "namespaces=rc-b")
}

// TestWatchAPIServerRestart: the API server restarts (a control-plane
// upgrade) while the watch is cut off from it, and etcd compacts the
// history meanwhile: a change made in the gap is older than anything the
// API server can replay, so the watch must re-list, and the re-list,
// compared with what it knew, still starts the cycle; after that, changes
// trigger as before. Its own API server: the shared one is not restarted.
func TestWatchAPIServerRestart(t *testing.T) {
	dir := testenv.KubeAssets(t)
	ctrllog.SetLogger(logr.Discard())
	// A certificate directory of its own, kept across the restart: with a
	// random one, envtest would serve a new CA after it.
	// etcd compacted every second: a resourceVersion from before the
	// restart is gone after it, so the watch cannot resume and must re-list.
	apiServer := &envtest.APIServer{CertDir: t.TempDir()}
	apiServer.Configure().Set("etcd-compaction-interval", "1s")
	env := &envtest.Environment{BinaryAssetsDirectory: dir, ControlPlane: envtest.ControlPlane{APIServer: apiServer}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	namespace(t, cs, "rs-a")
	proxy := newCutProxy(t, upstreamOf(t, cfg))
	watchCfg, lists := countLists(proxy.through(cfg))
	r := start(t, cfg, watchCfg, []string{"rs-a"}, []trigger.Agent{}, 0)
	ctx := context.Background()
	if _, err := cs.NetworkingV1().NetworkPolicies("rs-a").Create(ctx, netpol("rs-a", "one"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("before the restart", "namespaces=rs-a")

	proxy.setCut(true)
	if _, err := cs.NetworkingV1().NetworkPolicies("rs-a").Patch(ctx, "one", "application/merge-patch+json",
		[]byte(`{"spec":{"egress":[{"to":[{"ipBlock":{"cidr":"0.0.0.0/0"}}]}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.ControlPlane.APIServer.Stop(); err != nil {
		t.Fatalf("stop the API server: %v", err)
	}
	if err := env.ControlPlane.APIServer.Start(); err != nil {
		t.Fatalf("restart the API server: %v", err)
	}
	// Other objects' changes move the resourceVersion on past the patch,
	// and the compaction takes everything before them.
	for _, name := range []string{"rs-x", "rs-y"} {
		namespace(t, cs, name)
	}
	time.Sleep(4 * time.Second)
	proxy.setCut(false)
	r.expect("a change made across the restart", "namespaces=rs-a")
	if n := lists.Load(); n < 2 {
		t.Errorf("networkpolicies listed %d times: the watch resumed instead of re-listing, so the re-list path went untested", n)
	}

	if err := cs.NetworkingV1().NetworkPolicies("rs-a").Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("after the restart", "namespaces=rs-a")
}
