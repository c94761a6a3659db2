package redistest

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

// PKI is a CA, a server and a client certificate signed by it, and a
// second CA that signed neither, as PEM files.
type PKI struct {
	CA, OtherCA           string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// TLSFiles are the files a TLS server with these certificates needs, with
// a client certificate required when authClients.
func (p PKI) TLSFiles(authClients bool) TLSFiles {
	return TLSFiles{CertFile: p.ServerCert, KeyFile: p.ServerKey, CAFile: p.CA,
		AuthClients: authClients, ClientCertFile: p.ClientCert, ClientKeyFile: p.ClientKey}
}

// WritePKI makes certificates valid for a day in dir: ca.pem,
// other-ca.pem, server.pem and client.pem, each certificate with its key
// in NAME-key.pem. The server's certificate is for IP 127.0.0.1 and DNS
// name redis.test.
func WritePKI(dir string) (PKI, error) {
	p := PKI{
		CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	ca, caKey, err := newCA("semrun test CA", p.CA)
	if err != nil {
		return PKI{}, err
	}
	if _, _, err := newCA("semrun unrelated CA", p.OtherCA); err != nil {
		return PKI{}, err
	}
	server := leaf("redis.test", x509.ExtKeyUsageServerAuth)
	server.DNSNames = []string{"redis.test"}
	server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	if err := sign(server, ca, caKey, p.ServerCert, p.ServerKey); err != nil {
		return PKI{}, err
	}
	if err := sign(leaf("semrun test client", x509.ExtKeyUsageClientAuth), ca, caKey, p.ClientCert, p.ClientKey); err != nil {
		return PKI{}, err
	}
	return p, nil
}

// newCA makes a self-signed CA and writes its certificate to file.
func newCA(name, file string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := leaf(name, 0)
	tmpl.ExtKeyUsage = nil
	tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(file, "CERTIFICATE", der)
}

// leaf is a certificate template for name, valid from an hour ago (clocks
// differ) for a day; its serial is random, so that no two share one.
func leaf(name string, usage x509.ExtKeyUsage) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
}

// sign signs tmpl with the CA and writes the certificate and its key.
func sign(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyFile, "PRIVATE KEY", pkcs8)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
