package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certSANs are the lab's server certificates, one per serving namespace
// (and the proxy's, which Squid serves its refusals inside TLS with): every
// name and address there.
func certSANs() map[string][]string {
	var api, git, ext, meta []string
	for _, h := range AllowedHosts {
		switch h.NS {
		case NSAPI:
			api = append(api, h.Name, h.IP4, h.IP6)
		case NSGit:
			git = append(git, h.Name, h.IP4, h.IP6)
		}
	}
	for _, h := range FrontedHosts {
		if h.NS == NSAPI {
			api = append(api, h.Name)
		}
	}
	git = append(git, "*.git.lab.test")
	for _, t := range BlockedHosts {
		ext = append(ext, t.Key, t.IP4, t.IP6)
	}
	for _, t := range RawTargets {
		ext = append(ext, t.IP4, t.IP6)
	}
	meta = append(meta, MetadataName)
	for _, s := range MetadataStandins {
		meta = append(meta, s.IP4, s.IP6)
	}
	return map[string][]string{"api": api, "git": git, "ext": ext, "meta": meta,
		"proxy": {"proxy.lab.test", ProxyIP4, ProxyIP6}}
}

// writeCerts makes a new lab CA (dir/ca.pem) and signs every server's
// certificate with it (dir/tls/NAME.pem, NAME.key): EC P-256.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{Organization: []string{"sandprobe lab"}, CommonName: "sandprobe lab CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "tls", "ca.key"), caKey); err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	for name, sans := range certSANs() {
		if err := writeLeaf(dir, name, sans, caCert, caKey); err != nil {
			return err
		}
	}
	return nil
}

func writeLeaf(dir, name string, sans []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	c := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{Organization: []string{"sandprobe lab"}, CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(0, 0, 825), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			c.IPAddresses = append(c.IPAddresses, ip)
		} else {
			c.DNSNames = append(c.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, c, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "tls", name+".pem"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, "tls", name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
