package main

import (
	"errors"
	"os/exec"
	"regexp"
	"sort"
	"strings"

	"github.com/sandprobe/sandprobe/internal/lab"
)

func (s *selftestRun) ca() string { return s.l.Dir + "/ca.pem" }

// curlCode: "<http_code>/<connect_code>" (000 when no HTTP answer).
func curlCode(args ...string) string {
	b, _ := exec.Command("ip", append([]string{"netns", "exec", lab.NSSandbox, "curl", "-sS", "--max-time", "5", "-o", "/dev/null",
		"-w", "%{http_code}/%{http_connect}"}, args...)...).Output()
	return strings.TrimSpace(string(b))
}

// curlBody: the first two words of the answer's first line.
func curlBody(args ...string) string {
	f := strings.Fields(firstLine(sbx(append([]string{"curl", "-sS", "--max-time", "5"}, args...)...)))
	return strings.Join(f[:min(2, len(f))], " ")
}

func curlExit(args ...string) string {
	err := exec.Command("ip", append([]string{"netns", "exec", lab.NSSandbox, "curl", "-sS", "--max-time", "5"}, args...)...).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return itoa(ee.ExitCode())
	}
	return "0"
}

// statusLine: the HTTP status line curl -v shows for the answer.
func statusLine(args ...string) string {
	v := sbx(append([]string{"curl", "-sS", "--max-time", "5", "-v"}, args...)...)
	m := regexp.MustCompile(`(?m)^< (HTTP[^\r\n]*)`).FindStringSubmatch(v)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(m[1])
}

func (s *selftestRun) proxy() {
	px := lab.ProxyURL
	for _, h := range lab.AllowedHosts {
		s.check("proxy CONNECT "+h.Name+":443 + TLS (lab CA)", "sandprobe-lab host="+h.Name, curlBody("--cacert", s.ca(), "-x", px, "https://"+h.Name+"/"))
		s.check("proxy GET http://"+h.Name+"/", "sandprobe-lab host="+h.Name, curlBody("-x", px, "http://"+h.Name+"/"))
	}
	s.check("proxy over IPv6 CONNECT api.lab.test", "200/200", curlCode("--cacert", s.ca(), "-x", lab.ProxyURL6, "https://api.lab.test/"))
	s.check("proxy CONNECT objects.git.lab.test answers 200", "200/200", curlCode("--cacert", s.ca(), "-x", px, "https://objects.git.lab.test/"))
	s.check("TLS fails without the lab CA", "60", curlExit("-o", "/dev/null", "-x", px, "https://api.lab.test/"))
	for _, c := range [][3]string{
		{"proxy CONNECT blocked.lab.test -> 403", "000/403", "-k https://blocked.lab.test/"},
		{"proxy CONNECT exfil.lab.test -> 403", "000/403", "-k https://exfil.lab.test/"},
		{"proxy GET http://exfil.lab.test/ -> 403", "403/000", "http://exfil.lab.test/"},
		{"proxy CONNECT example.com -> 403", "000/403", "-k https://example.com/"},
		{"proxy CONNECT raw IP of api.lab.test -> 403", "000/403", "-k https://10.99.10.10/"},
		{"proxy CONNECT metadata -> 403", "000/403", "-p http://" + lab.MetadataIP4 + "/"},
		{"proxy CONNECT api.lab.test:8080 -> 403", "000/403", "-p http://api.lab.test:8080/"},
		{"proxy CONNECT evilgit.lab.test -> 403", "000/403", "-k https://evilgit.lab.test/"},
	} {
		s.check(c[0], c[1], curlCode(append([]string{"-x", px}, strings.Fields(c[2])...)...))
	}
	s.check("proxy denied reason line", "HTTP/1.1 403 Filtered", statusLine("-k", "-x", px, "https://blocked.lab.test/"))
	s.fronting()
	s.concurrency()
}

// fronting: a tunnel for api.lab.test carrying a ClientHello for
// fronted.lab.test (which the api front also serves).
func (s *selftestRun) fronting() {
	front := []string{"--cacert", s.ca(), "-x", lab.ProxyURL, "--connect-to", "fronted.lab.test:443:api.lab.test:443"}
	f := strings.Fields(firstLine(sbx(append([]string{"curl", "-sS", "--max-time", "5"}, append(front, "https://fronted.lab.test/")...)...)))
	got := ""
	if len(f) >= 7 {
		got = f[5] + " " + f[6]
	}
	s.check("tinyproxy: fronted.lab.test through a tunnel for api.lab.test answers", "sni=fronted.lab.test hostheader=fronted.lab.test", got)
	if _, err := exec.LookPath("squid"); err != nil {
		s.check("squid installed (squid-openssl) for the squid flavour", "yes", "no")
		return
	}
	s.op("proxy squid", func() error { return s.l.SetProxy("squid") })
	s.check("squid: proxy CONNECT api.lab.test + TLS", "sandprobe-lab host=api.lab.test", curlBody("--cacert", s.ca(), "-x", lab.ProxyURL, "https://api.lab.test/"))
	s.check("squid: ClientHello for fronted.lab.test cut (curl 35)", "35", curlExit(append(append([]string{"-o", "/dev/null"}, front...), "https://fronted.lab.test/")...))
	s.check("squid: CONNECT blocked.lab.test -> 200, then 403 inside TLS", "403/200", curlCode("-k", "-x", lab.ProxyURL, "https://blocked.lab.test/"))
	s.check("squid: GET http://blocked.lab.test/ -> 403", "403/000", curlCode("-x", lab.ProxyURL, "http://blocked.lab.test/"))
	s.heal("", "")
	s.check("heal returns to tinyproxy", "tinyproxy", s.l.ProxyFlavour())
}

// tally: "VALUExCOUNT ..." of a list, sorted.
func tally(vals []string) string {
	n := map[string]int{}
	for _, v := range vals {
		n[v]++
	}
	var out []string
	for v, c := range n {
		out = append(out, v+"x"+itoa(c))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// concurrency: 200 requests, 100 at a time, through the proxy with TLS;
// and 200 concurrent direct connections to live listeners (egress-open).
func (s *selftestRun) concurrency() {
	args := []string{"curl", "-s", "--max-time", "30", "-Z", "--parallel-max", "100", "--cacert", s.ca(), "-x", lab.ProxyURL, "-w", "%{http_code}\n"}
	for i := 1; i <= 200; i++ {
		args = append(args, "-o", "/dev/null", "https://api.lab.test/c"+itoa(i))
	}
	b, _ := exec.Command("ip", append([]string{"netns", "exec", lab.NSSandbox}, args...)...).Output()
	s.check("200 concurrent HTTPS via proxy all 200", "200x200", tally(strings.Fields(string(b))))
	s.brk("egress-open", "")
	var targets []string
	for i := 1; i <= 100; i++ {
		targets = append(targets, "a"+itoa(i)+"=10.99.20.10:80", "b"+itoa(i)+"=[fd99:0:0:11::11]:80")
	}
	res := s.sweepRaw("10", targets)
	var vals []string
	for _, v := range res {
		vals = append(vals, v)
	}
	s.check("200 concurrent direct connections answered", "OK:objects.git.lab.testx100 OK:raw-dropx100", tally(vals))
	s.heal("egress-open", "")
}

// sweepRaw runs the lab's sweep client in the sandbox: KEY -> result.
func (s *selftestRun) sweepRaw(timeout string, targets []string) map[string]string {
	b, _ := exec.Command("ip", append([]string{"netns", "exec", lab.NSSandbox, s.bin, "sweep", "--timeout", timeout}, targets...)...).Output()
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			res[k] = v
		}
	}
	return res
}
