package serviceaccount

import (
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"

	jose "github.com/go-jose/go-jose/v4"
)

// The paths of the OpenID Connect discovery documents, kube's.
const (
	OpenIDConfigPath = "/.well-known/openid-configuration"
	JWKSPath         = "/openid/v1/jwks"
)

// Metadata is what the discovery paths serve, encoded once: the OpenID
// configuration and the JSON Web Key Set of the verification keys.
type Metadata struct {
	Config []byte
	JWKS   []byte
}

// openIDConfig is kube's openIDMetadata.
type openIDConfig struct {
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	ResponseTypes []string `json:"response_types_supported"`
	SubjectTypes  []string `json:"subject_types_supported"`
	SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
}

// NewMetadata returns the discovery documents of issuer, whose keys are
// keys (those that verify tokens), as kube's NewOpenIDMetadataProvider
// builds them: the issuer must be an https URL without query or fragment.
// jwksURI, if empty, is the issuer's JWKSPath.
func NewMetadata(issuer, jwksURI string, keys []crypto.PublicKey) (*Metadata, error) {
	iss, err := url.Parse(issuer)
	if err != nil {
		return nil, fmt.Errorf("issuer %q is not a URL: %w", issuer, err)
	}
	if iss.Scheme != "https" {
		return nil, fmt.Errorf("issuer %q: the OpenID discovery documents need an https URL", issuer)
	}
	if iss.RawQuery != "" || iss.Fragment != "" {
		return nil, fmt.Errorf("issuer %q may not include a query or fragment", issuer)
	}
	if jwksURI == "" {
		jwksURI = iss.JoinPath(JWKSPath).String()
	} else if u, err := url.Parse(jwksURI); err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("JWKS URI %q must be an https URL", jwksURI)
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys to publish")
	}
	var set jose.JSONWebKeySet
	var algs []string
	for _, k := range keys {
		alg, err := algorithm(k)
		if err != nil {
			return nil, err
		}
		kid, err := keyID(k)
		if err != nil {
			return nil, err
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Algorithm: string(alg), Key: k, KeyID: kid, Use: "sig"})
		if !slices.Contains(algs, string(alg)) {
			algs = append(algs, string(alg))
		}
	}
	slices.Sort(algs)
	config, err := json.Marshal(openIDConfig{
		Issuer:        issuer,
		JWKSURI:       jwksURI,
		ResponseTypes: []string{"id_token"},
		SubjectTypes:  []string{"public"},
		SigningAlgs:   algs,
	})
	if err != nil {
		return nil, err
	}
	jwks, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	return &Metadata{Config: config, JWKS: jwks}, nil
}
