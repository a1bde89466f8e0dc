package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/sourcegraph/conc"

	"github.com/sandprobe/sandprobe/internal/lab"
)

// list is a flag given once per value.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// cmdServe: `serve --map ADDR=NAME ... [--cert C --key K] [--ready FILE]
// [--served FILE] [--quic-port 443]`: HTTP on :80 and HTTPS on :443
// (dual-stack), every request answered with a body naming the host that
// was reached; with --quic-port, QUIC's Version Negotiation on each
// mapped address.
func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var maps list
	fs.Var(&maps, "map", "ADDR=NAME: the name an address answers as (repeat)")
	cert := fs.String("cert", "", "TLS certificate (PEM)")
	key := fs.String("key", "", "TLS key (PEM)")
	httpPort := fs.Int("http-port", 80, "HTTP port")
	httpsPort := fs.Int("https-port", 443, "HTTPS port")
	quicPort := fs.Int("quic-port", 0, "UDP port where each mapped address answers a QUIC client's first packet with Version Negotiation (0: none)")
	ready := fs.String("ready", "", "file written (with the pid) once listening")
	served := fs.String("served", "", "append one line per request answered: time client host port scheme path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := &lab.Served{Names: map[string]string{}}
	for _, m := range maps {
		addr, name, ok := strings.Cut(m, "=")
		if !ok {
			return fmt.Errorf("--map %q: want ADDR=NAME", m)
		}
		s.Names[netip.MustParseAddr(addr).Unmap().String()] = name
	}
	if *served != "" {
		f, err := os.OpenFile(*served, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		s.Log = f
	}
	plain, err := net.Listen("tcp", ":"+strconv.Itoa(*httpPort))
	if err != nil {
		return err
	}
	var wg conc.WaitGroup
	wg.Go(func() { s.ServeHTTP(plain, nil) })
	if *cert != "" {
		kp, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return err
		}
		secure, err := net.Listen("tcp", ":"+strconv.Itoa(*httpsPort))
		if err != nil {
			return err
		}
		wg.Go(func() { s.ServeHTTP(secure, &tls.Config{Certificates: []tls.Certificate{kp}}) })
	}
	if *quicPort > 0 {
		// One socket per address: an answer must leave from the address
		// the probe's connected UDP socket sent to.
		for addr := range s.Names {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, strconv.Itoa(*quicPort)))
			if err != nil {
				return err
			}
			wg.Go(func() { lab.ServeQUIC(pc) })
		}
	}
	if err := lab.WriteReady(*ready); err != nil {
		return err
	}
	wg.Wait()
	return nil
}

// cmdAuthority: `authority --listen ADDR ... --record NAME=IP,IP ...
// --wildcard ZONE=IP,IP --log FILE [--ready FILE]`: the internet's DNS, UDP
// and TCP 53 on every ADDR.
func cmdAuthority(args []string) error {
	fs := flag.NewFlagSet("authority", flag.ContinueOnError)
	var listen, records, wildcards list
	fs.Var(&listen, "listen", "address to answer on (repeat)")
	fs.Var(&records, "record", "NAME=IP,IP (repeat)")
	fs.Var(&wildcards, "wildcard", "ZONE=IP,IP: every name under ZONE (repeat)")
	port := fs.Int("port", 53, "port")
	logPath := fs.String("log", "", "append every question here")
	ready := fs.String("ready", "", "file written (with the pid) once listening")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *logPath == "" {
		return errors.New("authority: --log is required")
	}
	a := &lab.Authority{Records: map[string][]netip.Addr{}, Wildcards: map[string][]netip.Addr{}}
	for _, r := range records {
		if err := addRecord(a.Records, r); err != nil {
			return err
		}
	}
	for _, w := range wildcards {
		if err := addRecord(a.Wildcards, w); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	a.Log = f
	var wg conc.WaitGroup
	for _, addr := range listen {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, strconv.Itoa(*port)))
		if err != nil {
			return err
		}
		wg.Go(func() { a.ServeUDP(pc) })
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	wg.Go(func() { a.ServeTCP(ln) })
	if err := lab.WriteReady(*ready); err != nil {
		return err
	}
	wg.Wait()
	return nil
}

func addRecord(m map[string][]netip.Addr, spec string) error {
	name, ips, ok := strings.Cut(spec, "=")
	if !ok {
		return fmt.Errorf("record %q: want NAME=IP,IP", spec)
	}
	for _, ip := range strings.Split(ips, ",") {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return fmt.Errorf("record %q: %w", spec, err)
		}
		m[strings.ToLower(name)] = append(m[strings.ToLower(name)], a)
	}
	return nil
}
