package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
	"k8s.io/client-go/util/keyutil"
)

// LoadSigningKey reads --service-account-signing-key-file as kube-apiserver
// does (keyutil.PrivateKeyFromFile): a PEM RSA or ECDSA private key.
func LoadSigningKey(path string) (crypto.Signer, error) {
	key, err := keyutil.PrivateKeyFromFile(path)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: a %T cannot sign", path, key)
	}
	if _, err := algorithm(signer.Public()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return signer, nil
}

// LoadPublicKeys reads a --service-account-key-file as kube-apiserver does
// (keyutil.PublicKeysFromFile): every RSA or ECDSA key of its PEM blocks —
// public keys, certificates, or private keys (their public halves).
func LoadPublicKeys(path string) ([]crypto.PublicKey, error) {
	keys, err := keyutil.PublicKeysFromFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]crypto.PublicKey, 0, len(keys))
	for _, k := range keys {
		if _, err := algorithm(k); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// algorithm is the JWS algorithm a key signs with, as kube's: RS256 for
// RSA, ES256, ES384 or ES512 by the ECDSA curve.
func algorithm(pub crypto.PublicKey) (jose.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return jose.RS256, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
		return "", fmt.Errorf("unknown ECDSA curve %s, must be P-256, P-384 or P-521", k.Curve.Params().Name)
	}
	return "", fmt.Errorf("unknown key type %T, must be RSA or ECDSA", pub)
}

// keyID is kube's keyIDFromPublicKey: the unpadded base64url SHA-256 of
// the key's PKIX DER, so that the key cannot be recovered from it.
func keyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("serialize public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
