package probes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/sandprobe/sandprobe/result"
)

// credFile is a file that holds a credential when holds says so.
type credFile struct {
	rel, what string
	// holds says whether the content is a credential (a .npmrc that only
	// names ${NPM_TOKEN} holds none); nil means any content does.
	holds func([]byte) bool
}

// credFiles are where tools keep credentials, relative to a home directory.
var credFiles = []credFile{
	{".git-credentials", "git's stored credentials (credential.helper store)", nil},
	{".config/git/credentials", "git's stored credentials (credential.helper store)", nil},
	{".netrc", "netrc logins (curl, git, pip, ftp)", hasWord("password")},
	{"_netrc", "netrc logins (curl, git, pip, ftp)", hasWord("password")},
	{".npmrc", "an npm registry token", npmrcHoldsAuth},
	{".yarnrc.yml", "a yarn registry token", hasKeyValue("npmAuthToken")},
	{".docker/config.json", "Docker registry credentials (auths)", dockerConfigHoldsAuth},
	{".aws/credentials", "AWS access keys", hasKeyValue("aws_secret_access_key", "aws_session_token")},
	{".aws/config", "AWS access keys or a credential_process", hasKeyValue("aws_secret_access_key", "aws_session_token", "credential_process")},
	{".config/gcloud/application_default_credentials.json", "Google application default credentials", nil},
	{".config/gcloud/credentials.db", "gcloud's stored credentials", nil},
	{".config/gcloud/access_tokens.db", "gcloud's access tokens", nil},
	{".azure/msal_token_cache.json", "Azure CLI tokens", nil},
	{".azure/msal_token_cache.bin", "Azure CLI tokens", nil},
	{".azure/accessTokens.json", "Azure CLI tokens", nil},
	{".azure/service_principal_entries.json", "Azure service principal secrets", nil},
	{".oci/config", "an Oracle Cloud API key", hasKeyValue("key_file")},
	{".kube/config", "a kubeconfig the policy does not declare", kubeconfigHoldsCred},
	{".config/gh/hosts.yml", "GitHub CLI's token", hasKeyValue("oauth_token")},
	{".pypirc", "PyPI upload credentials", hasKeyValue("password")},
	{".cargo/credentials.toml", "a crates.io token", nil},
	{".cargo/credentials", "a crates.io token", nil},
	{".gem/credentials", "a RubyGems API key", nil},
	{".terraform.d/credentials.tfrc.json", "a Terraform Cloud token", nil},
	{".ssh/id_rsa", "an SSH private key", hasWord("PRIVATE KEY")},
	{".ssh/id_ecdsa", "an SSH private key", hasWord("PRIVATE KEY")},
	{".ssh/id_ed25519", "an SSH private key", hasWord("PRIVATE KEY")},
	{".ssh/id_dsa", "an SSH private key", hasWord("PRIVATE KEY")},
}

// credEnvFiles are variables that point tools at a credential file (or a
// directory holding one, with the file's name).
var credEnvFiles = []struct{ env, file, what string }{
	{"KUBECONFIG", "", "a kubeconfig the policy does not declare"},
	{"GOOGLE_APPLICATION_CREDENTIALS", "", "Google application default credentials"},
	{"AWS_SHARED_CREDENTIALS_FILE", "", "AWS access keys"},
	{"DOCKER_CONFIG", "config.json", "Docker registry credentials (auths)"},
	{"NPM_CONFIG_USERCONFIG", "", "an npm registry token"},
	{"CLOUDSDK_CONFIG", "application_default_credentials.json", "Google application default credentials"},
	{"AZURE_CONFIG_DIR", "msal_token_cache.json", "Azure CLI tokens"},
}

func hasWord(w string) func([]byte) bool {
	return func(b []byte) bool { return bytes.Contains(b, []byte(w)) }
}

// hasKeyValue: an INI, TOML or YAML line "KEY = VALUE" (or "KEY: VALUE")
// with a value that is not empty, the key matched case-insensitively.
func hasKeyValue(keys ...string) func([]byte) bool {
	return func(b []byte) bool {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				k, v, ok = strings.Cut(line, ":")
			}
			v = strings.Trim(strings.TrimSpace(v), `"'`)
			if !ok || v == "" {
				continue
			}
			if slices.ContainsFunc(keys, func(key string) bool { return strings.EqualFold(strings.TrimSpace(k), key) }) {
				return true
			}
		}
		return false
	}
}

// npmrcHoldsAuth: a _authToken, _auth or _password with a literal value;
// "${NPM_TOKEN}" only names a variable (creds.env-secrets judges that).
func npmrcHoldsAuth(b []byte) bool {
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") || strings.HasPrefix(k, ";") {
			continue
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"'`)
		if v == "" || strings.HasPrefix(v, "${") {
			continue
		}
		for _, suffix := range []string{"_authToken", "_auth", "_password"} {
			if k == suffix || strings.HasSuffix(k, ":"+suffix) {
				return true
			}
		}
	}
	return false
}

// dockerConfigHoldsAuth: an auths entry with an auth, identity or registry
// token; credsStore and credHelpers keep the secret elsewhere.
func dockerConfigHoldsAuth(b []byte) bool {
	var c struct {
		Auths map[string]struct {
			Auth          string `json:"auth"`
			IdentityToken string `json:"identitytoken"`
			RegistryToken string `json:"registrytoken"`
			Password      string `json:"password"`
		} `json:"auths"`
	}
	if json.Unmarshal(b, &c) != nil {
		return false
	}
	for _, a := range c.Auths {
		if a.Auth != "" || a.IdentityToken != "" || a.RegistryToken != "" || a.Password != "" {
			return true
		}
	}
	return false
}

// kubeconfigHoldsCred: a user with a token, a token file, a client key or
// a password (an exec plugin fetches its credential elsewhere).
func kubeconfigHoldsCred(b []byte) bool {
	var kc kubeconfig
	if yaml.Unmarshal(b, &kc) != nil {
		return false
	}
	for _, u := range kc.Users {
		if u.User.Token != "" || u.User.TokenFile != "" || u.User.KeyData != "" || u.User.Key != "" {
			return true
		}
	}
	return bytes.Contains(b, []byte("password:"))
}

const credFilesExp = "no credential file readable beyond the declared credentials (spec.credentials)"

// checkCredFiles looks for credential files the sandbox can read — in its
// HOME, root's and every user's home, the shared workspace, and wherever
// the environment points tools (KUBECONFIG, GOOGLE_APPLICATION_CREDENTIALS,
// …) — leaving out what the policy declares. Each is named by path and what
// it holds; its content is read to tell, and never reported.
func checkCredFiles(_ context.Context, env *Env) []result.Finding {
	cands, looked := credCandidates(env)
	var out []result.Finding
	for _, c := range cands {
		b, err := readSmallRegular(c.path, 4<<20)
		if err != nil {
			continue // absent, unreadable by this uid, or not a file: not in reach
		}
		if c.cf.holds != nil && !c.cf.holds(b) {
			continue
		}
		ev := "the content is not reported"
		if fi, err := os.Stat(c.path); err == nil {
			ev = describeFile(fi) + "; " + ev
		}
		out = append(out, fail(c.path, credFilesExp, fmt.Sprintf("readable by uid %d: %s", os.Getuid(), c.cf.what), ev))
	}
	if len(out) == 0 {
		out = append(out, pass("", credFilesExp, "none readable",
			fmt.Sprintf("%d places tools keep credentials, under %s and where the environment points tools, opened as uid %d", len(cands), strings.Join(looked, ", "), os.Getuid())))
	}
	return out
}

// credCandidate is a place a tool keeps a credential, and what it holds.
type credCandidate struct {
	path string
	cf   credFile
}

// credCandidates lists where to look, each place once and none the policy
// declares: the credential files under every home, then the files the
// environment names; and the homes looked in.
func credCandidates(env *Env) ([]credCandidate, []string) {
	var declared []string
	for _, c := range env.Policy.Spec.Credentials {
		declared = append(declared, c.MountPath)
	}
	isDeclared := func(p string) bool {
		return slices.ContainsFunc(declared, func(d string) bool { return p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") })
	}
	var cands []credCandidate
	seen := map[string]bool{}
	addCand := func(p string, cf credFile) {
		if p == "" || seen[p] || isDeclared(p) {
			return
		}
		seen[p] = true
		cands = append(cands, credCandidate{p, cf})
	}
	var looked []string
	for _, h := range credHomes(env) {
		if h == "" || slices.Contains(looked, h) {
			continue
		}
		looked = append(looked, h)
		for _, cf := range credFiles {
			addCand(filepath.Join(h, cf.rel), cf)
		}
	}
	for _, ev := range credEnvFiles {
		for _, p := range filepath.SplitList(envValue(env.Environ, ev.env)) {
			if p == "" || !filepath.IsAbs(p) {
				continue
			}
			if ev.file != "" {
				p = filepath.Join(p, ev.file)
			}
			addCand(p, credFile{rel: p, what: ev.what + " (named by $" + ev.env + ")", holds: envFileHolds(ev.env)})
		}
	}
	return cands, looked
}

// credHomes are the sandbox's HOME, root's and every user's home, and the
// shared workspace.
func credHomes(env *Env) []string {
	homes := []string{envValue(env.Environ, "HOME"), "/root"}
	if entries, err := os.ReadDir("/home"); err == nil {
		for _, e := range entries {
			homes = append(homes, filepath.Join("/home", e.Name()))
		}
	}
	if ws := env.Policy.Spec.Phases.Workspace; ws != "" {
		homes = append(homes, ws)
	}
	return homes
}

// envFileHolds tells whether a file named by the variable holds a
// credential (nil: any readable file counts).
func envFileHolds(variable string) func([]byte) bool {
	switch variable {
	case "KUBECONFIG":
		return kubeconfigHoldsCred
	case "DOCKER_CONFIG":
		return dockerConfigHoldsAuth
	case "NPM_CONFIG_USERCONFIG":
		return npmrcHoldsAuth
	}
	return nil
}
