package probes

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/sandprobe/sandprobe/policy"
)

// kubeCred is a Kubernetes credential the sandbox holds, ready to ask the
// API server with. Its secret parts (the token, the client key) never leave
// this struct: errors and evidence name files, never their contents.
type kubeCred struct {
	server    string
	namespace string // the context's (or the namespace file's), "" if none
	from      string // where it was read, for evidence: "kubeconfig /run/kube/config (context ci)"
	client    *http.Client
	token     string
	secrets   []string // every secret string, to scrub from findings
}

// errUnauthorized is the API server refusing the credential itself (401).
var errUnauthorized = errors.New("the API server does not accept the credential (401 Unauthorized): expired, revoked, or not one it knows")

// loadKubeCred finds the credential under the mount path the policy
// declares: a kubeconfig (named, or mountPath itself, or config/kubeconfig
// in it) or a bearer token with its server and CA.
func loadKubeCred(cr policy.Credential, environ []string) (*kubeCred, error) {
	k := cr.Kubernetes
	root := cr.MountPath
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("credential %s: mountPath %s: %w", cr.Name, root, err)
	}
	switch {
	case k.Token != "":
		return tokenCred(cr, filepath.Join(root, k.Token), environ)
	case k.Kubeconfig != "":
		return kubeconfigCred(filepath.Join(root, k.Kubeconfig))
	case !fi.IsDir():
		return kubeconfigCred(root)
	}
	for _, name := range []string{"kubeconfig", "config"} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			return kubeconfigCred(filepath.Join(root, name))
		}
	}
	if _, err := os.Stat(filepath.Join(root, "token")); err == nil {
		return tokenCred(cr, filepath.Join(root, "token"), environ)
	}
	return nil, fmt.Errorf("credential %s: %s holds no kubeconfig, config or token (name it: kubernetes.kubeconfig or kubernetes.token)", cr.Name, root)
}

// tokenCred is a mounted bearer token (a service-account token secret or a
// projected one): the server is the policy's or the in-cluster one.
func tokenCred(cr policy.Credential, path string, environ []string) (*kubeCred, error) {
	k := cr.Kubernetes
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credential %s: read token file %s: %w", cr.Name, path, err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return nil, fmt.Errorf("credential %s: token file %s is empty", cr.Name, path)
	}
	server := k.Server
	if server == "" {
		host, port := envValue(environ, "KUBERNETES_SERVICE_HOST"), envValue(environ, "KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, fmt.Errorf("credential %s: a token needs kubernetes.server (no KUBERNETES_SERVICE_HOST/PORT in the sandbox)", cr.Name)
		}
		server = "https://" + net.JoinHostPort(host, port)
	}
	caFile := k.CAFile
	if caFile == "" {
		caFile = filepath.Join(filepath.Dir(path), "ca.crt")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("credential %s: read CA %s: %w", cr.Name, caFile, err)
	}
	tlsCfg, err := tlsFor(pem, false, "")
	if err != nil {
		return nil, fmt.Errorf("credential %s: CA %s: %w", cr.Name, caFile, err)
	}
	c := &kubeCred{server: strings.TrimSuffix(server, "/"), from: "token " + path, token: token, secrets: []string{token}, client: httpClient(tlsCfg)}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(path), "namespace")); err == nil {
		c.namespace = strings.TrimSpace(string(b))
	}
	return c, nil
}

// kubeconfig is the part of a kubeconfig the probe reads.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server        string `yaml:"server"`
			CA            string `yaml:"certificate-authority"`
			CAData        string `yaml:"certificate-authority-data"`
			Insecure      bool   `yaml:"insecure-skip-tls-verify"`
			TLSServerName string `yaml:"tls-server-name"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster   string `yaml:"cluster"`
			User      string `yaml:"user"`
			Namespace string `yaml:"namespace"`
		} `yaml:"context"`
	} `yaml:"contexts"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			Token        string    `yaml:"token"`
			TokenFile    string    `yaml:"tokenFile"`
			Cert         string    `yaml:"client-certificate"`
			CertData     string    `yaml:"client-certificate-data"`
			Key          string    `yaml:"client-key"`
			KeyData      string    `yaml:"client-key-data"`
			Exec         yaml.Node `yaml:"exec"`
			AuthProvider yaml.Node `yaml:"auth-provider"`
		} `yaml:"user"`
	} `yaml:"users"`
}

// kubeconfigCred reads a kubeconfig's current context. A decoding error is
// reported without the decoder's text, which can quote the file (a token).
func kubeconfigCred(path string) (*kubeCred, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s is not a kubeconfig this probe can read (its content is not shown: it holds a secret)", path)
	}
	ctxName := kc.CurrentContext
	if ctxName == "" && len(kc.Contexts) == 1 {
		ctxName = kc.Contexts[0].Name
	}
	var clusterName, userName, ns string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == ctxName {
			clusterName, userName, ns, found = c.Context.Cluster, c.Context.User, c.Context.Namespace, true
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: no context %q", path, ctxName)
	}
	rd := kubeconfigReader{kc: &kc, path: path}
	c := &kubeCred{namespace: ns, from: fmt.Sprintf("kubeconfig %s (context %s)", path, ctxName)}
	tlsCfg, err := rd.cluster(c, clusterName)
	if err != nil {
		return nil, err
	}
	if err := rd.user(c, userName, tlsCfg); err != nil {
		return nil, err
	}
	if c.token != "" {
		c.secrets = append(c.secrets, c.token)
	}
	c.client = httpClient(tlsCfg)
	return c, nil
}

// kubeconfigReader reads the parts of a kubeconfig file that a context
// names.
type kubeconfigReader struct {
	kc   *kubeconfig
	path string
}

// rel resolves a path in the kubeconfig: relative to the file.
func (rd kubeconfigReader) rel(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(rd.path), p)
}

// cluster sets c's server from the named cluster (https only: the probe
// sends no credential in the clear) and returns the TLS configuration
// that trusts its CA.
func (rd kubeconfigReader) cluster(c *kubeCred, clusterName string) (*tls.Config, error) {
	path := rd.path
	var caPEM []byte
	var err error
	insecure, serverName := false, ""
	for _, cl := range rd.kc.Clusters {
		if cl.Name != clusterName {
			continue
		}
		c.server = strings.TrimSuffix(cl.Cluster.Server, "/")
		insecure, serverName = cl.Cluster.Insecure, cl.Cluster.TLSServerName
		switch {
		case cl.Cluster.CAData != "":
			if caPEM, err = base64.StdEncoding.DecodeString(cl.Cluster.CAData); err != nil {
				return nil, fmt.Errorf("kubeconfig %s: cluster %s: certificate-authority-data is not base64", path, clusterName)
			}
		case cl.Cluster.CA != "":
			if caPEM, err = os.ReadFile(rd.rel(cl.Cluster.CA)); err != nil {
				return nil, fmt.Errorf("kubeconfig %s: cluster %s: %w", path, clusterName, err)
			}
		}
	}
	if c.server == "" {
		return nil, fmt.Errorf("kubeconfig %s: cluster %q has no server", path, clusterName)
	}
	if !strings.HasPrefix(c.server, "https://") {
		return nil, fmt.Errorf("kubeconfig %s: server %s is not https: the probe sends no credential in the clear", path, c.server)
	}
	tlsCfg, err := tlsFor(caPEM, insecure, serverName)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: cluster %s: %w", path, clusterName, err)
	}
	return tlsCfg, nil
}

// user sets c's credential from the named user: a token, a token file or
// a client certificate (into tlsCfg); never a plugin, which would run a
// program the kubeconfig names.
func (rd kubeconfigReader) user(c *kubeCred, userName string, tlsCfg *tls.Config) error {
	path := rd.path
	userFound := false
	for _, u := range rd.kc.Users {
		if u.Name != userName {
			continue
		}
		userFound = true
		us := u.User
		switch {
		case !us.Exec.IsZero() || !us.AuthProvider.IsZero():
			return fmt.Errorf("kubeconfig %s: user %s gets its credential from a plugin (exec or auth-provider); the probe runs no program from a kubeconfig", path, userName)
		case us.Token != "":
			c.token = us.Token
		case us.TokenFile != "":
			b, err := os.ReadFile(rd.rel(us.TokenFile))
			if err != nil {
				return fmt.Errorf("kubeconfig %s: user %s: read tokenFile: %w", path, userName, err)
			}
			c.token = strings.TrimSpace(string(b))
		case us.CertData != "" || us.Cert != "":
			certPEM, keyPEM, err := clientPair(us.CertData, us.KeyData, rd.rel(us.Cert), rd.rel(us.Key))
			if err != nil {
				return fmt.Errorf("kubeconfig %s: user %s: %w", path, userName, err)
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return fmt.Errorf("kubeconfig %s: user %s: the client certificate and key do not make a pair", path, userName)
			}
			tlsCfg.Certificates = []tls.Certificate{pair}
			c.secrets = append(c.secrets, string(keyPEM), strings.TrimSpace(us.KeyData))
		default:
			return fmt.Errorf("kubeconfig %s: user %s has no token, tokenFile or client certificate", path, userName)
		}
	}
	if !userFound {
		return fmt.Errorf("kubeconfig %s: no user %q", path, userName)
	}
	return nil
}

func clientPair(certData, keyData, certFile, keyFile string) ([]byte, []byte, error) {
	read := func(data, file, what string) ([]byte, error) {
		if data != "" {
			b, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				return nil, fmt.Errorf("%s data is not base64", what)
			}
			return b, nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		return b, nil
	}
	cert, err := read(certData, certFile, "client certificate")
	if err != nil {
		return nil, nil, err
	}
	key, err := read(keyData, keyFile, "client key")
	return cert, key, err
}

func tlsFor(caPEM []byte, insecure bool, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("the CA holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// httpClient talks to the API server directly: never through a proxy the
// environment names (the credential goes to the API server only).
func httpClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: cfg, TLSHandshakeTimeout: 5 * time.Second, MaxIdleConnsPerHost: 4,
	}}
}

// post sends one review object and decodes the answer into out.
func (c *kubeCred) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.server+path, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sandprobe")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s%s: %w", c.server, path, scrubErr(err, c.secrets))
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return errUnauthorized
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("POST %s: %w", path, errNotServed)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, apiMessage(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("POST %s: decode the answer: %w", path, err)
	}
	return nil
}

// errNotServed is an API the server does not serve (404).
var errNotServed = errors.New("not served by this API server")

// apiMessage is a Status object's message, or a short prefix of the body.
func apiMessage(data []byte) string {
	var st struct{ Message string }
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		return st.Message
	}
	return strings.TrimSpace(string(data[:min(len(data), 200)]))
}

// scrubErr drops an error's text when it would carry a secret (it never
// should: the token travels in a header): better no detail than a leak.
func scrubErr(err error, secrets []string) error {
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			return errors.New("the request failed (the error held the credential and is not shown)")
		}
	}
	return err
}

func envValue(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}
