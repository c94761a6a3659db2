package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/settingfile"
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

// maxTLSFile bounds a CA, certificate or key file: a bundle of a few
// hundred CAs takes a few hundred KiB.
const maxTLSFile = 4 << 20

// apply checks o and sets it on base, go-redis's TLS configuration for the
// URL (nil when it is not rediss://), reading the files it names.
func (o *Options) applyTLS(base *tls.Config, shown string) error {
	t, names := o.TLS, o.names()
	for _, s := range []struct {
		setting semaphore.Setting
		on      bool
	}{{TLSCASetting, t.CAFile != ""}, {TLSCertSetting, t.CertFile != ""}, {TLSKeySetting, t.KeyFile != ""},
		{TLSServerNameSetting, t.ServerName != ""}, {TLSInsecureSetting, t.Insecure}} {
		if s.on && base == nil {
			return &semaphore.SettingError{Setting: s.setting,
				Err: fmt.Errorf("needs a rediss:// URL, not %s (%s)", shown, names.Name(URLSetting))}
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return &semaphore.SettingError{Setting: TLSCertSetting, Value: t.CertFile, Err: fmt.Errorf("needs %s", names.Name(TLSKeySetting))}
	case t.KeyFile != "" && t.CertFile == "":
		return &semaphore.SettingError{Setting: TLSKeySetting, Value: t.KeyFile, Err: fmt.Errorf("needs %s", names.Name(TLSCertSetting))}
	case base == nil:
		return nil
	}
	if t.CAFile != "" {
		pem, _, err := settingfile.Read(t.CAFile, maxTLSFile)
		if err != nil {
			return &semaphore.SettingError{Setting: TLSCASetting, Value: t.CAFile, Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return &semaphore.SettingError{Setting: TLSCASetting, Value: t.CAFile, Err: errors.New("no PEM certificate in it")}
		}
		base.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, _, err := settingfile.Read(t.CertFile, maxTLSFile)
		if err != nil {
			return &semaphore.SettingError{Setting: TLSCertSetting, Value: t.CertFile, Err: err}
		}
		key, err := settingfile.Secret(t.KeyFile, maxTLSFile)
		if err != nil {
			return &semaphore.SettingError{Setting: TLSKeySetting, Value: t.KeyFile, Err: err}
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return &semaphore.SettingError{Setting: TLSCertSetting, Value: t.CertFile,
				Err: fmt.Errorf("with the key %s: %w", t.KeyFile, err)}
		}
		base.Certificates = []tls.Certificate{pair}
	}
	if t.ServerName != "" {
		base.ServerName = t.ServerName
	}
	base.InsecureSkipVerify = t.Insecure
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

// plainText tells a TLS handshake answered in plain text: a rediss://
// URL that points at a port where Redis does not speak TLS. It will not
// heal, so it is not retried.
func plainText(err error) bool {
	var header tls.RecordHeaderError
	return errors.As(err, &header) || errors.Is(err, errPlainText)
}

// errPlainText is a handshake that got no answer from a server that
// answers a plain PING: a Redis without TLS, waiting for the end of a
// line the ClientHello never sends.
var errPlainText = errors.New("the TLS handshake got no answer")

// tlsAnswerWithin is how long a TLS handshake may go unanswered before
// semrun asks the server in plain text whether it speaks TLS at all.
const tlsAnswerWithin = time.Second

// tlsDialer dials as go-redis does for rediss://, but a handshake that
// gets no answer within tlsAnswerWithin is looked into: a server that
// answers a plain PING speaks no TLS there (errPlainText, at once, not
// after the connect timeout); any other gets the whole timeout again.
func tlsDialer(cfg *tls.Config, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		first := &net.Dialer{Timeout: min(timeout, tlsAnswerWithin)}
		conn, err := tls.DialWithDialer(first, network, addr, cfg)
		var nerr net.Error
		if err == nil || !errors.As(err, &nerr) || !nerr.Timeout() || timeout <= tlsAnswerWithin {
			return conn, err
		}
		if answersPlainText(ctx, network, addr) {
			return nil, fmt.Errorf("%s: %w", addr, errPlainText)
		}
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout - tlsAnswerWithin}, network, addr, cfg)
	}
}

// answersPlainText tells whether the server at addr answers a PING in
// Redis's plain protocol ("+PONG", or "-NOAUTH" and the like).
func answersPlainText(ctx context.Context, network, addr string) bool {
	d := net.Dialer{Timeout: tlsAnswerWithin}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(tlsAnswerWithin))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return false
	}
	var b [1]byte
	n, _ := c.Read(b[:])
	return n == 1 && (b[0] == '+' || b[0] == '-')
}

// trustHint says which setting decides what failed to verify, for an
// error untrusted reported; empty when none does.
func (s *Store) trustHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var op *net.OpError
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf(" (%s names the CAs trusted to sign Redis's certificate)", s.names.Name(TLSCASetting))
	case errors.As(err, &hostname):
		return fmt.Sprintf(" (%s sets the name it must have; the URL's host otherwise)", s.names.Name(TLSServerNameSetting))
	case plainText(err):
		return fmt.Sprintf(" (Redis answers there in plain text: use redis://, or the TLS port in %s)", s.names.Name(URLSetting))
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Sprintf(" (Redis refused semrun's client certificate: see %s and %s)",
			s.names.Name(TLSCertSetting), s.names.Name(TLSKeySetting))
	}
	return ""
}
