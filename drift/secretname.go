package drift

import (
	"path"
	"strings"
)

// secretName returns the secret pattern a variable name matches, if any.
func (e *Engine) secretName(name string) string {
	up := strings.ToUpper(name)
	for i := range e.patterns {
		if e.patterns[i].match(up) {
			return e.p.Spec.Secrets.EnvNamePatterns[i]
		}
	}
	return ""
}

// glob is a secret-name pattern. Patterns made of literals and "*" (all the
// usual ones: "*_KEY", "*PASSWORD*") are matched without path.Match, which
// is a fifth of the engine's time otherwise; anything else falls back to it.
type glob struct {
	raw   string
	parts []string // raw split on "*", when simple
}

func compileGlob(p string) glob {
	g := glob{raw: strings.ToUpper(p)}
	if !strings.ContainsAny(g.raw, `?[\`) {
		g.parts = strings.Split(g.raw, "*")
	}
	return g
}

func (g glob) match(s string) bool {
	if g.parts == nil {
		ok, _ := path.Match(g.raw, s)
		return ok
	}
	if len(g.parts) == 1 {
		return s == g.parts[0]
	}
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, mid := range g.parts[1 : len(g.parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return true
}
