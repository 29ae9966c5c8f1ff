package main

// Certificates and keys for the local control plane, generated with the Go
// standard library (no openssl needed). Everything is ECDSA P-256: quick to
// generate and accepted by kube-apiserver for serving, client auth and
// ServiceAccount token signing (ES256).

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pkiFiles are the file names, relative to <dir>/pki.
type pkiFiles struct {
	dir string
}

func (p pkiFiles) path(name string) string { return filepath.Join(p.dir, name) }
func (p pkiFiles) CACert() string          { return p.path("ca.crt") }
func (p pkiFiles) CAKey() string           { return p.path("ca.key") }
func (p pkiFiles) ServingCert() string     { return p.path("apiserver.crt") }
func (p pkiFiles) ServingKey() string      { return p.path("apiserver.key") }
func (p pkiFiles) AdminCert() string       { return p.path("admin.crt") }
func (p pkiFiles) AdminKey() string        { return p.path("admin.key") }
func (p pkiFiles) SAKey() string           { return p.path("sa.key") }
func (p pkiFiles) SAPub() string           { return p.path("sa.pub") }

const certValidity = 365 * 24 * time.Hour

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// generatePKI writes a fresh CA, an apiserver serving cert, an admin client
// cert (O=system:masters) and a ServiceAccount signing key pair.
func generatePKI(p pkiFiles) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock skew

	caKey, err := newKey()
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "gpuaccept-local-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePEM(p.CACert(), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writeKey(p.CAKey(), caKey); err != nil {
		return err
	}

	issue := func(certPath, keyPath string, tmpl *x509.Certificate) error {
		key, err := newKey()
		if err != nil {
			return err
		}
		sn, err := serial()
		if err != nil {
			return err
		}
		tmpl.SerialNumber = sn
		tmpl.NotBefore = now
		tmpl.NotAfter = now.Add(certValidity)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}

	if err := issue(p.ServingCert(), p.ServingKey(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(serviceIP)},
	}); err != nil {
		return fmt.Errorf("serving cert: %w", err)
	}
	if err := issue(p.AdminCert(), p.AdminKey(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("admin cert: %w", err)
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(p.SAKey(), saKey); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(p.SAPub(), "PUBLIC KEY", pubDER, 0o644)
}
