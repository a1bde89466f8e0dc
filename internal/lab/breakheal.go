package lab

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Break switches a broken state on; flush-rule takes the rule's name.
func (l *Lab) Break(state, name string) error {
	if state == "" {
		return fmt.Errorf("usage: lab break STATE (one of: %s)", strings.Join(BrokenStates, " "))
	}
	if !slices.Contains(BrokenStates, state) {
		return fmt.Errorf("unknown state '%s' (one of: %s)", state, strings.Join(BrokenStates, " "))
	}
	broken := l.Broken()
	if state == "flush-rule" {
		// the CNI regression: the rule(s) carrying this name are gone
		live := l.liveRuleNames()
		if name == "" {
			return fmt.Errorf("usage: lab break flush-rule NAME (rules: %s)", strings.Join(live, " "))
		}
		if !slices.Contains(live, name) {
			return fmt.Errorf("no rule named '%s' in %s %s (rules: %s)", name, NftTable, NftChain, strings.Join(live, " "))
		}
		state = "flush-rule:" + name
	}
	if !slices.Contains(broken, state) {
		if err := l.setBroken(append(broken, state)); err != nil {
			return err
		}
	}
	if err := l.applyState(strings.SplitN(state, ":", 2)[0]); err != nil {
		return err
	}
	l.say("broken: %s", strings.Replace(state, ":", " ", 1))
	return nil
}

// liveRuleNames are the names the sandbox's chain has now (what a flush
// can still delete).
func (l *Lab) liveRuleNames() []string {
	var names []string
	broken := l.Broken()
	for _, n := range RuleNames() {
		if !slices.Contains(broken, "flush-rule:"+n) {
			names = append(names, n)
		}
	}
	return names
}

// applyState re-derives what a state change touches.
func (l *Lab) applyState(state string) error {
	switch state {
	case "egress-open", "raw-ips-open", "metadata-open", "ipv6-open", "proxy-bypass", "flush-rule", "quic-open":
		return l.applyNft()
	case "proxy-open", "proxy-nolog", "proxy-allows-blocked":
		return l.restartProxy()
	case "dns-open":
		return l.restartDNS()
	case "allowed-down":
		if l.isBroken("allowed-down") {
			l.stop("srv-api")
			l.stop("srv-git")
			return nil
		}
		return l.ensureServers("srv-api", "srv-git")
	}
	return nil
}

// Heal switches a broken state off ("" heals all, and returns the proxy to
// tinyproxy); flush-rule without a name restores every flushed rule.
func (l *Lab) Heal(state, name string) error {
	if state == "" {
		return l.healAll()
	}
	if !slices.Contains(BrokenStates, state) {
		return fmt.Errorf("unknown state '%s'", state)
	}
	keep := slices.DeleteFunc(l.Broken(), func(s string) bool {
		if state == "flush-rule" && name == "" {
			return strings.HasPrefix(s, "flush-rule:")
		}
		if state == "flush-rule" {
			return s == "flush-rule:"+name
		}
		return s == state
	})
	if err := l.setBroken(keep); err != nil {
		return err
	}
	if err := l.applyState(state); err != nil {
		return err
	}
	l.say("healed: %s", strings.TrimSpace(state+" "+name))
	return nil
}

func (l *Lab) healAll() error {
	was := l.Broken()
	if err := l.setBroken(nil); err != nil {
		return err
	}
	var errs []error
	if l.ProxyFlavour() != "tinyproxy" {
		os.WriteFile(l.statePath("proxy-flavour"), []byte("tinyproxy\n"), 0o644)
		errs = append(errs, l.restartProxy())
	}
	var states []string
	for _, s := range was {
		s = strings.SplitN(s, ":", 2)[0]
		if !slices.Contains(states, s) {
			states = append(states, s)
		}
	}
	slices.Sort(states)
	for _, s := range states {
		errs = append(errs, l.applyState(s))
	}
	errs = append(errs, l.applyNft(), l.applyState("allowed-down"), l.ensureServices())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	l.say("healed: all")
	return nil
}

// ensureServices restarts any lab daemon that is not running (a process
// killed from outside the lab must not turn a healthy lab into a dead one).
func (l *Lab) ensureServices() error {
	if !l.alive("dnsmasq") {
		if err := l.restartDNS(); err != nil {
			return err
		}
	}
	if !l.alive(l.ProxyFlavour()) {
		if err := l.restartProxy(); err != nil {
			return err
		}
	}
	if !l.alive("authority") {
		l.stop("authority")
		if err := l.startAuthority(); err != nil {
			return err
		}
		if err := l.waitReady("authority"); err != nil {
			return err
		}
	}
	return l.ensureServers("srv-ext", "srv-meta")
}

// SetProxy switches the proxy's flavour (tinyproxy or squid).
func (l *Lab) SetProxy(flavour string) error {
	if !slices.Contains(ProxyFlavours, flavour) {
		return fmt.Errorf("unknown proxy flavour '%s' (one of: %s)", flavour, strings.Join(ProxyFlavours, " "))
	}
	if _, err := lookPath(flavour); err != nil {
		return fmt.Errorf("missing tool: %s (hack/install-deps.sh installs squid-openssl)", flavour)
	}
	if err := os.WriteFile(l.statePath("proxy-flavour"), []byte(flavour+"\n"), 0o644); err != nil {
		return err
	}
	if err := l.restartProxy(); err != nil {
		return err
	}
	l.say("proxy: %s", flavour)
	return nil
}
