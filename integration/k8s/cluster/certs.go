package cluster

import (
	"crypto"
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

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the cluster's certificate authority and the files it signed, all
// under one directory of the run. Keys are ECDSA P-256 (fast to make; every
// component accepts them, the service-account signer included as ES256).
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	serial int64
}

// newPKI makes a self-signed CA valid for a day and writes ca.crt and ca.key.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "podwire-k8s-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("failed to self-sign the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, serial: 1}
	if err := writePEM(p.path("ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return p, writeKey(p.path("ca.key"), key)
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// issue signs a certificate for cn (organisations orgs; server
// certificates also get the DNS names and IPs) and writes NAME.crt and
// NAME.key.
func (p *pki) issue(name, cn string, orgs []string, server bool, dns []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames, tmpl.IPAddresses = dns, ips
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("failed to sign the certificate %s: %w", name, err)
	}
	if err := writePEM(p.path(name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

// serviceAccountKey writes the service-account signing key pair sa.key
// and sa.pub.
func (p *pki) serviceAccountKey() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.path("sa.pub"), "PUBLIC KEY", pub); err != nil {
		return err
	}
	return writeKey(p.path("sa.key"), key)
}

// kubeconfig writes a kubeconfig for the client certificate NAME.crt
// against server, with every file embedded.
func (p *pki) kubeconfig(path, name, server string) error {
	var files [3][]byte
	for i, f := range []string{"ca.crt", name + ".crt", name + ".key"} {
		b, err := os.ReadFile(p.path(f))
		if err != nil {
			return err
		}
		files[i] = b
	}
	return writeKubeconfig(path, server, files[0], name, &clientcmdapi.AuthInfo{ClientCertificateData: files[1], ClientKeyData: files[2]}, "")
}

// writeKubeconfig writes a kubeconfig at path (mode 0600) whose one
// context is user, authenticated by auth, at the API server server (its CA
// certificate in PEM, ca) in namespace ("": default).
func writeKubeconfig(path, server string, ca []byte, user string, auth *clientcmdapi.AuthInfo, namespace string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["podwire-k8s"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "podwire-k8s", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, path)
}

// WriteKubeconfig writes a kubeconfig at path (mode 0600) for user of the
// cluster's API server, authenticated by auth (a ServiceAccount's token, a
// client certificate), in namespace ("": default).
func (c *Cluster) WriteKubeconfig(path, user string, auth *clientcmdapi.AuthInfo, namespace string) error {
	ca, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return err
	}
	return writeKubeconfig(path, c.APIServerURL(), ca, user, auth, namespace)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// loadPKI copies the CA (ca.crt, ca.key) of another run's pki from src
// into dst and signs with it from there: the nodes of a cluster whose
// control plane runs elsewhere (Options.ControlPlane) get their
// certificates from its CA. Serials start far above the control plane's.
func loadPKI(src, dst string) (*pki, error) {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, err
	}
	var blocks [2]*pem.Block
	for i, f := range []string{"ca.crt", "ca.key"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return nil, fmt.Errorf("the control plane's CA: %w", err)
		}
		if blocks[i], _ = pem.Decode(b); blocks[i] == nil {
			return nil, fmt.Errorf("the control plane's CA: %s holds no PEM block", filepath.Join(src, f))
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o600); err != nil {
			return nil, err
		}
	}
	cert, err := x509.ParseCertificate(blocks[0].Bytes)
	if err != nil {
		return nil, fmt.Errorf("the control plane's ca.crt: %w", err)
	}
	key, err := x509.ParseECPrivateKey(blocks[1].Bytes)
	if err != nil {
		return nil, fmt.Errorf("the control plane's ca.key: %w", err)
	}
	return &pki{dir: dst, caCert: cert, caKey: key, serial: 1 << 20}, nil
}
