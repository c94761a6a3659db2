package semaphore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// TLSOptions configure TLS to Redis, as redis-cli's --cacert, --cert,
// --key and --sni do. They apply to a rediss:// URL only.
type TLSOptions struct {
	// CAFile holds the PEM certificates that may sign the server's; the
	// system's when empty.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key, for a
	// server that asks for one (tls-auth-clients); both or neither.
	CertFile, KeyFile string
	// ServerName is the name to verify the server's certificate against;
	// the URL's host when empty.
	ServerName string
	// Insecure skips verifying the server's certificate.
	Insecure bool
}

func (o *TLSOptions) set() bool {
	return o != nil && (o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.ServerName != "" || o.Insecure)
}

// apply sets o on base, go-redis's TLS configuration for the URL.
func (o *TLSOptions) apply(base *tls.Config) error {
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS CA file %s: no PEM certificate in it", o.CAFile)
		}
		base.RootCAs = pool
	}
	switch {
	case o.CertFile != "" && o.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return fmt.Errorf("TLS client certificate %s and key %s: %w", o.CertFile, o.KeyFile, err)
		}
		base.Certificates = []tls.Certificate{pair}
	case o.CertFile != "" || o.KeyFile != "":
		return errors.New("a TLS client certificate needs its key, and a key its certificate")
	}
	if o.ServerName != "" {
		base.ServerName = o.ServerName
	}
	if o.Insecure {
		base.InsecureSkipVerify = true
	}
	return nil
}

// untrusted tells a failure to trust the server's certificate, which
// retrying does not heal.
func untrusted(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	// Over TCP, an alert from the server (a client certificate refused)
	// comes as a net.OpError whose Op says so.
	var op *net.OpError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &alert) || errors.As(err, &op) && op.Op == "remote error"
}

// trustHint says which setting decides what failed to verify, for an
// error untrusted reported; empty when none does.
func trustHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var op *net.OpError
	switch {
	case errors.As(err, &unknown):
		return " (--tls-ca names the CAs trusted to sign Redis's certificate)"
	case errors.As(err, &hostname):
		return " (--tls-server-name sets the name it must have; the URL's host otherwise)"
	case errors.As(err, &op) && op.Op == "remote error":
		return " (Redis refused semrun's client certificate: see --tls-cert and --tls-key)"
	}
	return ""
}
