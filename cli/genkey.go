package cli

// sluice genkey: the secrets a gateway's configuration names, made from
// crypto/rand, as wg genkey/genpsk and strongSwan's pki --gen make theirs:
//
//	psk   a pre-shared key for [[secret]] (swanctl's 0s base64 form)
//	esp   enc_key (and auth_key) lines for an [[sa]] table of a suite
//	cert  a private key and a self-signed certificate, or a CSR, for
//	      [[tls.cert]] or an IKE connection's certs

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/cryptodev"
)

func init() {
	commands = append(commands, newGenkeyCommand)
}

func newGenkeyCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "genkey",
		Short: "Make pre-shared keys, ESP keys, and private keys with a certificate or CSR",
		Long: `Make the secrets a gateway's configuration names, from the system's
random source:

  sluice genkey psk                 a pre-shared key for a [[secret]] (0s + base64)
  sluice genkey esp --esp SUITE     enc_key (and auth_key) for an [[sa]] table
  sluice genkey cert --name NAME BASE
                                    BASE.key and a self-signed BASE.pem (or,
                                    with --csr, BASE.csr for a CA to sign)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newGenkeyPSKCommand(e), newGenkeyESPCommand(e), newGenkeyCertCommand(e))
	return cmd
}

func newGenkeyPSKCommand(e *env) *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "psk [--bytes N]",
		Short: "Print a random pre-shared key as swanctl.conf writes one (0s + base64)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 16 || n > 1024 {
				return usageErr("--bytes %d: want 16 to 1024 (16 is the least config accepts)", n)
			}
			b, err := randomBytes(n)
			if err != nil {
				return err
			}
			defer clear(b)
			_, err = fmt.Fprintf(e.stdout, "0s%s\n", base64.StdEncoding.EncodeToString(b))
			return err
		},
	}
	cmd.Flags().IntVar(&n, "bytes", 32, "length of the key in bytes")
	return cmd
}

func newGenkeyESPCommand(e *env) *cobra.Command {
	var suite string
	cmd := &cobra.Command{
		Use:   "esp [--esp SUITE]",
		Short: "Print enc_key (and auth_key) lines of random keys for an [[sa]] table",
		Long: `Print enc_key (and, for AES-CBC and NULL suites, auth_key) for one
direction's [[sa]] table, in hex; an AEAD suite's enc_key is the key
followed by its 4-byte salt, as ip-xfrm and Wireshark take it. Both
gateways' tables for that direction take the same lines; make another pair
for the other direction.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			alg, err := cryptodev.ParseAlg(suite)
			if err != nil {
				return usageErr("--esp: %v", err)
			}
			return writeESPKeys(e.stdout, alg)
		},
	}
	cmd.Flags().StringVar(&suite, "esp", "aes256gcm16", "ESP suite (strongSwan's keyword: aes128gcm16, chacha20poly1305, aes256-sha512, ...)")
	return cmd
}

// writeESPKeys writes the key lines of one [[sa]] table of alg.
func writeESPKeys(w io.Writer, alg cryptodev.Alg) error {
	lines := []struct {
		key string
		n   int
	}{{"enc_key", alg.EncKeyLen()}, {"auth_key", alg.Info().AuthKeyLen}}
	for _, l := range lines {
		if l.n == 0 {
			continue
		}
		b, err := randomBytes(l.n)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s = \"0x%s\"\n", l.key, hex.EncodeToString(b))
		clear(b)
		if err != nil {
			return err
		}
	}
	return nil
}

// genkeyCertOptions are the flags of sluice genkey cert.
type genkeyCertOptions struct {
	names []string
	kind  string
	days  int
	csr   bool
	force bool
}

func newGenkeyCertCommand(e *env) *cobra.Command {
	o := &genkeyCertOptions{}
	cmd := &cobra.Command{
		Use:   "cert --name NAME [--name NAME...] [--type TYPE] [--days N] [--csr] BASE",
		Short: "Write BASE.key and a self-signed certificate BASE.pem, or a CSR BASE.csr",
		Long: `Write a new private key to BASE.key (PKCS #8, mode 0600) and either a
self-signed certificate BASE.pem or, with --csr, a certificate signing
request BASE.csr for a CA. The first --name is the subject's common name;
every name is a subject alternative name: an IP address, an e-mail address
(with @) or a DNS name, which is what TLS clients and IKE peers match.
Existing files are not replaced unless --force.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("want one BASE (the files' path without .key/.pem), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGenkeyCert(e, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.names, "name", nil, "a name of the subject (repeat for more; the first is the common name)")
	f.StringVar(&o.kind, "type", "ecdsap256", "key type: ecdsap256, ecdsap384, rsa2048, rsa3072, rsa4096, ed25519")
	f.IntVar(&o.days, "days", 365, "validity of the self-signed certificate in days")
	f.BoolVar(&o.csr, "csr", false, "write a certificate signing request instead of a self-signed certificate")
	f.BoolVar(&o.force, "force", false, "replace existing files")
	return cmd
}

func runGenkeyCert(e *env, o *genkeyCertOptions, base string) error {
	if len(o.names) == 0 {
		return usageErr("--name: name the subject at least once (a DNS name, an IP address or an e-mail address)")
	}
	if o.days < 1 || o.days > 3650 {
		return usageErr("--days %d: want 1 to 3650", o.days)
	}
	alg, err := cryptodev.ParseAsymAlg(o.kind)
	if err != nil || !alg.CanSign() {
		return usageErr("--type %q: want ecdsap256, ecdsap384, rsa2048, rsa3072, rsa4096 or ed25519", o.kind)
	}
	priv, err := cryptodev.GenerateKey(alg)
	if err != nil {
		return err
	}
	signer := priv.(crypto.Signer)
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("genkey: %w", err)
	}
	defer clear(keyDER)
	subject := pkix.Name{CommonName: o.names[0]}
	var dns, emails []string
	var ips []net.IP
	for _, n := range o.names {
		switch {
		case net.ParseIP(n) != nil:
			ips = append(ips, net.ParseIP(n))
		case strings.Contains(n, "@"):
			emails = append(emails, n)
		default:
			dns = append(dns, n)
		}
	}
	var out []byte
	ext, blockType := ".pem", "CERTIFICATE"
	if o.csr {
		ext, blockType = ".csr", "CERTIFICATE REQUEST"
		out, err = x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: subject, DNSNames: dns, EmailAddresses: emails, IPAddresses: ips}, signer)
	} else {
		serial, serr := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
		if serr != nil {
			return fmt.Errorf("genkey: %w", serr)
		}
		now := time.Now()
		tmpl := &x509.Certificate{
			SerialNumber: serial, Subject: subject,
			NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(0, 0, o.days),
			KeyUsage:              x509.KeyUsageDigitalSignature,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
			DNSNames:              dns, EmailAddresses: emails, IPAddresses: ips,
		}
		out, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
	}
	if err != nil {
		return fmt.Errorf("genkey: %w", err)
	}
	keyFile, outFile := base+".key", base+ext
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	defer clear(keyPEM)
	if err := writeNewFile(keyFile, keyPEM, 0o600, o.force); err != nil {
		return err
	}
	if err := writeNewFile(outFile, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: out}), 0o644, o.force); err != nil {
		os.Remove(keyFile)
		return err
	}
	what := "self-signed certificate"
	if o.csr {
		what = "certificate signing request"
	}
	fmt.Fprintf(e.stdout, "wrote %s (%s private key, mode 0600) and %s (%s for %s)\n", keyFile, alg, outFile, what, strings.Join(o.names, ", "))
	return nil
}

// writeNewFile writes data to path with mode perm: a new file, or with
// force a replaced one (through a rename, so a reader never sees half a
// file and a replaced key file never has wider permissions than perm).
func writeNewFile(path string, data []byte, perm os.FileMode, force bool) error {
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			return withCode(ExitUsage, fmt.Errorf("genkey: %s exists (--force replaces it)", path))
		}
		if err != nil {
			return fmt.Errorf("genkey: %w", err)
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return fmt.Errorf("genkey: %w", err)
		}
		return nil
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("genkey: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("genkey: %w", err)
	}
	return nil
}

// randomBytes reads n bytes from crypto/rand.
func randomBytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("genkey: %w", err)
	}
	return b, nil
}
