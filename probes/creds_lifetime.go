package probes

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// checkTokenLifetime reads each declared credential's token as a JWT and
// holds its lifetime — exp − iat, from issue to expiry — against the
// policy's maxLifetime: a stolen copy is worth that long at most. The token
// itself, and every claim but the times, stay in this function.
func checkTokenLifetime(_ context.Context, env *Env) []result.Finding {
	now := time.Now()
	if env.Now != nil {
		now = env.Now()
	}
	var out []result.Finding
	for _, cr := range env.Policy.Spec.Credentials {
		if cr.MaxLifetime == nil {
			continue
		}
		max := cr.MaxLifetime.Duration
		exp := "a token that lives at most " + max.String() + " from issue to expiry"
		tokens, err := credentialTokens(cr, env.Environ)
		if err != nil {
			out = append(out, errorf(cr.Name, "%v", err))
			continue
		}
		var jwts int
		for _, tk := range tokens {
			c, ok := parseJWTClaims(tk.value)
			if !ok {
				continue
			}
			jwts++
			out = append(out, judgeLifetime(cr.Name, tk.from, c, max, exp, now))
		}
		if jwts == 0 {
			out = append(out, errorf(cr.Name, "credential %s: no JWT under %s (%d token files read): an opaque token's lifetime cannot be read from inside; the token is not reported", cr.Name, cr.MountPath, len(tokens)))
		}
	}
	return out
}

// jwtClaims are the times of a JWT; the rest of it is never kept.
type jwtClaims struct {
	Exp, Iat, Nbf *float64
}

func unixTime(f float64) time.Time {
	return time.Unix(int64(f), 0).UTC()
}

func judgeLifetime(subject, from string, c jwtClaims, max time.Duration, exp string, now time.Time) result.Finding {
	ev := "a JWT in " + from + "; the token is not reported"
	if c.Exp == nil {
		return fail(subject, exp, "the token never expires (no exp claim)", ev)
	}
	expires := unixTime(*c.Exp)
	state := "expires " + expires.Format(time.RFC3339)
	if expires.Before(now) {
		state = "expired " + expires.Format(time.RFC3339)
	}
	start, claim := c.Iat, "iat"
	if start == nil {
		start, claim = c.Nbf, "nbf"
	}
	if start == nil {
		left := expires.Sub(now).Round(time.Second)
		if left > max {
			return fail(subject, exp, fmt.Sprintf("the token still has %s to live (no iat or nbf claim): longer than %s whatever its issue time", left, max), ev+"; "+state)
		}
		f := pass(subject, exp, "", ev+"; "+state)
		f.Status, f.Actual = result.Inconclusive, fmt.Sprintf("no iat or nbf claim: the lifetime cannot be read (%s left)", left)
		f.Fix = "issue tokens with an iat claim (every Kubernetes TokenRequest token has one)"
		return f
	}
	issued := unixTime(*start)
	life := expires.Sub(issued)
	ev += fmt.Sprintf("; %s %s, %s", claim, issued.Format(time.RFC3339), state)
	if life > max {
		return fail(subject, exp, fmt.Sprintf("a token that lives %s (exp − %s)", life, claim), ev)
	}
	return pass(subject, exp, fmt.Sprintf("a token that lives %s (exp − %s)", life, claim), ev)
}

// parseJWTClaims reads the time claims of a compact JWS (three base64url
// parts, a JSON header naming its alg); ok is false for anything else.
func parseJWTClaims(tok string) (jwtClaims, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return jwtClaims{}, false
	}
	dec := func(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")) }
	hb, err := dec(parts[0])
	if err != nil {
		return jwtClaims{}, false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(hb, &h) != nil || h.Alg == "" {
		return jwtClaims{}, false
	}
	pb, err := dec(parts[1])
	if err != nil {
		return jwtClaims{}, false
	}
	var c jwtClaims
	var raw struct {
		Exp json.RawMessage `json:"exp"`
		Iat json.RawMessage `json:"iat"`
		Nbf json.RawMessage `json:"nbf"`
	}
	if json.Unmarshal(pb, &raw) != nil {
		return jwtClaims{}, false
	}
	num := func(m json.RawMessage) *float64 {
		var f float64
		if len(m) == 0 || json.Unmarshal(m, &f) != nil {
			return nil
		}
		return &f
	}
	c.Exp, c.Iat, c.Nbf = num(raw.Exp), num(raw.Iat), num(raw.Nbf)
	return c, true
}

// credToken is a token a credential holds and where it was read.
type credToken struct {
	value, from string
}

// credentialTokens reads the tokens a declared credential holds: the
// bearer token of a Kubernetes credential (its kubeconfig's user, or its
// token file), else every small regular file at or directly under its
// mountPath (a Secret volume's keys, links included).
func credentialTokens(cr policy.Credential, environ []string) ([]credToken, error) {
	if cr.Kubernetes != nil {
		c, err := loadKubeCred(cr, environ)
		if err != nil {
			return nil, err
		}
		if c.token == "" {
			return nil, fmt.Errorf("credential %s: %s holds no token (a client certificate): maxLifetime bounds JWTs", cr.Name, c.from)
		}
		return []credToken{{c.token, c.from}}, nil
	}
	fi, err := os.Stat(cr.MountPath)
	if err != nil {
		return nil, fmt.Errorf("credential %s: mountPath %s: %s", cr.Name, cr.MountPath, errnoName(err))
	}
	paths := []string{cr.MountPath}
	if fi.IsDir() {
		entries, err := os.ReadDir(cr.MountPath)
		if err != nil {
			return nil, fmt.Errorf("credential %s: list %s: %s", cr.Name, cr.MountPath, errnoName(err))
		}
		paths = paths[:0]
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "..") { // a Secret volume's ..data and timestamped dirs
				paths = append(paths, filepath.Join(cr.MountPath, e.Name()))
			}
		}
		slices.Sort(paths)
	}
	var out []credToken
	for _, p := range paths {
		b, err := readSmallRegular(p, 64<<10)
		if err != nil {
			continue
		}
		out = append(out, credToken{strings.TrimSpace(string(b)), "file " + p})
	}
	return out, nil
}

var errNotSmallFile = errors.New("not a small regular file")

// readSmallRegular reads a regular file (following links) of at most max bytes.
func readSmallRegular(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, errNotSmallFile
	}
	var b bytes.Buffer
	_, err = io.Copy(&b, io.LimitReader(f, max))
	return b.Bytes(), err
}
