package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leaseplane test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// startServeArgs runs serve in this process with args and returns its
// printed URL, its key, its stderr and a stop function.
func startServeArgs(t *testing.T, args ...string) (url, key string, errs *servertest.Buffer, stop func()) {
	t.Helper()
	clock := servertest.NewClock()
	s := serveInProcess(t, args, serveEnv{clock: clock.Now, afterFunc: clock.AfterFunc})
	return s.url, s.key, s.errs, s.stop
}

// TestServeTLS: with --tls-cert and --tls-key the plane answers HTTPS only,
// prints an https URL, and does not warn; plain HTTP gets no answer.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	url, wsKey, errs, stop := startServeArgs(t, "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--log-level", "warn", "--tls-cert", cert, "--tls-key", key)
	defer stop()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("printed URL %q, want https", url)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", url+"/api/v1/acp/coordination/wait", nil)
	req.Header.Set("Authorization", "Bearer "+wsKey)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("wait over TLS: %d %s", resp.StatusCode, b)
	}
	if resp, err := http.Get("http://" + strings.TrimPrefix(url, "https://") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("plain HTTP was answered 200 on the TLS port")
		}
	}
	if strings.Contains(errs.String(), "without TLS") {
		t.Errorf("warned about TLS while serving it: %s", errs)
	}
}

// TestServeWarnsWithoutTLSBeyondLoopback: listening on every interface
// without TLS prints a warning; on loopback it does not.
func TestServeWarnsWithoutTLSBeyondLoopback(t *testing.T) {
	_, _, errs, stop := startServeArgs(t, "--addr", "0.0.0.0:0", "--data", t.TempDir(), "--log-level", "warn")
	stop()
	if !strings.Contains(errs.String(), "warning: serving on") || !strings.Contains(errs.String(), "without TLS") {
		t.Errorf("no warning for 0.0.0.0 without TLS: %s", errs)
	}
	_, _, errs, stop = startServeArgs(t, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "warn")
	stop()
	if strings.Contains(errs.String(), "without TLS") {
		t.Errorf("a warning on loopback: %s", errs)
	}
	var out, e strings.Builder
	if code := run([]string{"serve", "--tls-cert", "x.pem"}, nil, &out, &e); code != 2 || !strings.Contains(e.String(), "go together") {
		t.Errorf("--tls-cert alone: exit %d %s", code, e.String())
	}
}

// TestServeTLSRefusals: a certificate that does not load stops serve
// before it listens, naming the files; a client that offers only TLS 1.1
// gets no connection (the plane speaks TLS 1.2 and later).
func TestServeTLSRefusals(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, e strings.Builder
	if code := run([]string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "d1"), "--tls-cert", notPEM, "--tls-key", notPEM}, nil, &out, &e); code != 2 ||
		!strings.Contains(e.String(), "--tls-cert "+notPEM) {
		t.Errorf("a certificate that is not PEM: exit %d, %q; want 2 and a message naming it", code, e.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "d1", "leaseplane.db")); err == nil {
		t.Error("serve made a data folder before refusing its certificate")
	}
	cert, key, pool := selfSigned(t, dir)
	url, _, _, stop := startServeArgs(t, "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "d2"), "--log-level", "warn", "--tls-cert", cert, "--tls-key", key)
	defer stop()
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}}
	if resp, err := old.Get(url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("a TLS 1.1 client was answered %d", resp.StatusCode)
	}
	cur := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := cur.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("a TLS 1.2+ client: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("healthz over TLS: %d %+v", resp.StatusCode, resp.TLS)
	}
}
