//go:build !wasip1

package config

import (
	"crypto/x509"
	"fmt"
	"os"
)

// checkTrustedCAFile reports whether f, webhooks.trusted_ca_file, can be
// read and holds a PEM certificate. (The edge module leaves this to its
// host: see trustedca_wasip1.go.)
func checkTrustedCAFile(f string) error {
	pem, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no PEM certificate", f)
	}
	return nil
}
