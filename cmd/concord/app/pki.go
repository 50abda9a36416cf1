package app

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The certificates Concord generates when it is given no serving
// certificate (as k3s does): a CA, a serving certificate it signs for the
// server's names, and an admin client certificate (CN=concord-admin,
// O=system:masters) for the kubeconfig. They are kept in --cert-dir and
// reused at the next start while they are valid; a leaf certificate is
// issued again when it expires within leafRenewBefore or no longer covers
// the server's names, the CA (and so everything) when it is unusable.
const (
	pkiCAFile         = "ca.crt"
	pkiCAKeyFile      = "ca.key"
	pkiServingFile    = "serving.crt"
	pkiServingKeyFile = "serving.key"
	pkiAdminFile      = "admin.crt"
	pkiAdminKeyFile   = "admin.key"

	caValidity      = 10 * 365 * 24 * time.Hour
	leafValidity    = 365 * 24 * time.Hour
	leafRenewBefore = 90 * 24 * time.Hour

	// AdminUser and the masters group are the admin credential's user.
	adminUser    = "concord-admin"
	mastersGroup = "system:masters"
)

// selfSignedPKI is what the server serves and trusts in that case.
type selfSignedPKI struct {
	caCert    *x509.Certificate
	caPEM     []byte
	serving   tls.Certificate
	adminCert []byte // PEM
	adminKey  []byte // PEM
	// generated names the files written this time (for the log).
	generated []string
}

// servingNames are the names the serving certificate must cover: loopback,
// localhost, the host name, and the bind address (every interface's
// address when it is unspecified).
func servingNames(bindAddress string) ([]net.IP, []string) {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	dns := []string{"localhost"}
	if host, err := os.Hostname(); err == nil && host != "localhost" && len(validation.IsDNS1123Subdomain(host)) == 0 {
		dns = append(dns, host)
	}
	add := func(ip net.IP) {
		if ip == nil || ip.IsUnspecified() || slices.ContainsFunc(ips, ip.Equal) {
			return
		}
		ips = append(ips, ip)
	}
	bind := net.ParseIP(bindAddress)
	if bind != nil && bind.IsUnspecified() {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() {
					add(n.IP)
				}
			}
		}
	} else {
		add(bind)
	}
	return ips, dns
}

// loadOrCreatePKI reuses the certificates in dir while they are valid and
// generates what is missing or unusable.
func loadOrCreatePKI(dir string, ips []net.IP, dns []string, now time.Time) (*selfSignedPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create --cert-dir: %w", err)
	}
	p := &selfSignedPKI{}
	caCert, caKey, err := loadKeyPair(dir, pkiCAFile, pkiCAKeyFile)
	renewAll := err != nil || !caCert.IsCA || now.Add(leafValidity).After(caCert.NotAfter) || now.Before(caCert.NotBefore)
	if renewAll {
		caCert, caKey, err = newCA(now)
		if err != nil {
			return nil, err
		}
		if err := writeKeyPair(dir, pkiCAFile, pkiCAKeyFile, caCert.Raw, caKey); err != nil {
			return nil, err
		}
		p.generated = append(p.generated, pkiCAFile)
	}
	p.caCert = caCert
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw})

	serving, servingKey, err := loadKeyPair(dir, pkiServingFile, pkiServingKeyFile)
	if renewAll || err != nil || !leafValid(serving, caCert, now) || !covers(serving, ips, dns) {
		serving, servingKey, err = issue(caCert, caKey, now, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "concord"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: ips,
			DNSNames:    dns,
		})
		if err != nil {
			return nil, err
		}
		if err := writeKeyPair(dir, pkiServingFile, pkiServingKeyFile, serving.Raw, servingKey); err != nil {
			return nil, err
		}
		p.generated = append(p.generated, pkiServingFile)
	}
	p.serving = tls.Certificate{Certificate: [][]byte{serving.Raw, caCert.Raw}, PrivateKey: servingKey, Leaf: serving}

	admin, adminKey, err := loadKeyPair(dir, pkiAdminFile, pkiAdminKeyFile)
	if renewAll || err != nil || !leafValid(admin, caCert, now) ||
		admin.Subject.CommonName != adminUser || !slices.Equal(admin.Subject.Organization, []string{mastersGroup}) {
		admin, adminKey, err = issue(caCert, caKey, now, &x509.Certificate{
			Subject:     pkix.Name{CommonName: adminUser, Organization: []string{mastersGroup}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err != nil {
			return nil, err
		}
		if err := writeKeyPair(dir, pkiAdminFile, pkiAdminKeyFile, admin.Raw, adminKey); err != nil {
			return nil, err
		}
		p.generated = append(p.generated, pkiAdminFile)
	}
	p.adminCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: admin.Raw})
	keyDER, err := x509.MarshalPKCS8PrivateKey(adminKey)
	if err != nil {
		return nil, err
	}
	p.adminKey = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return p, nil
}

// leafValid reports whether ca signed cert and it is valid long enough.
func leafValid(cert, ca *x509.Certificate, now time.Time) bool {
	return cert.CheckSignatureFrom(ca) == nil && !now.Before(cert.NotBefore) && now.Add(leafRenewBefore).Before(cert.NotAfter)
}

// covers reports whether cert names every IP address and DNS name.
func covers(cert *x509.Certificate, ips []net.IP, dns []string) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, name := range dns {
		if !slices.Contains(cert.DNSNames, name) {
			return false
		}
	}
	return true
}

func newCA(now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("concord-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// issue signs a new key's certificate made of tmpl (subject, usages,
// names) with the CA.
func issue(ca *x509.Certificate, caKey crypto.Signer, now time.Time, tmpl *x509.Certificate) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(leafValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create the certificate of %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// loadKeyPair reads a PEM certificate and its private key from dir.
func loadKeyPair(dir, certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	if err != nil {
		return nil, nil, err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("the private key cannot sign")
	}
	return pair.Leaf, signer, nil
}

// writeKeyPair writes a certificate (0644) and its key (0600), each
// replaced atomically.
func writeKeyPair(dir, certFile, keyFile string, certDER []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, keyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, certFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), 0o644)
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	// A left-over temporary file would keep its permissions.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", path, err), os.Remove(tmp))
	}
	return nil
}

// certPoolOf parses the PEM certificates of data into a pool.
func certPoolOf(data []byte) (*x509.CertPool, bool) {
	pool := x509.NewCertPool()
	return pool, pool.AppendCertsFromPEM(bytes.TrimSpace(data))
}
