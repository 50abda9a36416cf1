package filters

import (
	"context"
	"crypto/x509"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The users and groups kube-apiserver gives every request.
const (
	// AnonymousUser is who sends a request without credentials, when
	// anonymous requests are allowed.
	AnonymousUser = "system:anonymous"
	// UnauthenticatedGroup is the group of the anonymous user.
	UnauthenticatedGroup = "system:unauthenticated"
	// AuthenticatedGroup is added to every authenticated user's groups.
	AuthenticatedGroup = "system:authenticated"
	// MastersGroup may do everything, whatever the policy says.
	MastersGroup = "system:masters"
)

// UserInfo is who sent a request: kube-apiserver's user.Info.
type UserInfo struct {
	Name   string
	UID    string
	Groups []string
	// Extra is what else the authenticator knows (a ServiceAccount
	// token's authentication.kubernetes.io/credential-id).
	Extra map[string][]string
}

// TokenAuthenticator authenticates bearer tokens of a kind the static
// token file does not hold (ServiceAccount tokens). ok is false, with no
// error, for a token that is not of its kind; an error refuses the token.
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string) (user UserInfo, ok bool, err error)
}

// Authentication says how requests prove who sends them, as
// kube-apiserver's authenticators do: a client certificate signed by one of
// ClientCAs (user = the certificate's CommonName, groups = its
// Organizations), or a bearer token of Tokens. A request with invalid
// credentials (an unknown token, a certificate no CA signed) is 401; a
// request with none is 401 too, unless Anonymous is set, in which case it
// is served as system:anonymous in the group system:unauthenticated.
type Authentication struct {
	// Tokens are the bearer tokens and their users (LoadTokenFile).
	Tokens map[string]UserInfo
	// TokenAuthenticator, when set, is asked about a bearer token that is
	// not one of Tokens, as kube-apiserver asks its authenticators in turn.
	TokenAuthenticator TokenAuthenticator
	// ClientCAs verify client certificates; nil: certificates are not
	// looked at.
	ClientCAs *x509.CertPool
	// Anonymous allows requests without credentials.
	Anonymous bool
}

// authenticate says who sent r; an error means 401.
func (a *Authentication) authenticate(r *http.Request) (*UserInfo, error) {
	var errs []error
	if a.ClientCAs != nil && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		user, ok, err := a.certificateUser(r.TLS.PeerCertificates)
		if ok {
			return authenticated(user), nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if token, ok := bearerToken(r); ok {
		user, ok := a.Tokens[token]
		if ok {
			return authenticated(user), nil
		}
		invalid := errors.New("invalid bearer token")
		if a.TokenAuthenticator != nil {
			user, ok, err := a.TokenAuthenticator.AuthenticateToken(r.Context(), token)
			if ok {
				return authenticated(user), nil
			}
			if err != nil {
				invalid = err
			}
		}
		errs = append(errs, invalid)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if a.Anonymous {
		return &UserInfo{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}, nil
	}
	return nil, errors.New("no credentials, and anonymous requests are not allowed")
}

// certificateUser verifies a client certificate chain against ClientCAs
// for client authentication. A certificate without a CommonName names no
// user (ok false, no error), as in kube-apiserver.
func (a *Authentication) certificateUser(chain []*x509.Certificate) (UserInfo, bool, error) {
	opts := x509.VerifyOptions{
		Roots:         a.ClientCAs,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return UserInfo{}, false, fmt.Errorf("client certificate %q: %w", chain[0].Subject.CommonName, err)
	}
	if chain[0].Subject.CommonName == "" {
		return UserInfo{}, false, nil
	}
	return UserInfo{Name: chain[0].Subject.CommonName, Groups: slices.Clone(chain[0].Subject.Organization)}, true, nil
}

// authenticated adds system:authenticated to a user's groups.
func authenticated(u UserInfo) *UserInfo {
	u.Groups = slices.Clone(u.Groups)
	if !slices.Contains(u.Groups, AuthenticatedGroup) {
		u.Groups = append(u.Groups, AuthenticatedGroup)
	}
	return &u
}

// bearerToken is the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// LoadTokenFile reads kube-apiserver's static token file
// (--token-auth-file): CSV lines of token,user,uid and optionally a fourth
// column of comma-separated groups, quoted when there is more than one:
//
//	31ada4fd-adec-460c-809a-9e56ceb75269,alice,1001,"team-a,dev"
//
// Further columns are ignored. A line with an empty token is skipped; a
// token given twice names the last user. Every line needs at least three
// columns.
func LoadTokenFile(path string) (map[string]UserInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tokens := map[string]UserInfo{}
	reader := csv.NewReader(f)
	reader.FieldsPerRecord = -1
	reader.TrimLeadingSpace = true
	for {
		record, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("token file %s: %w", path, err)
		}
		if len(record) < 3 {
			line, _ := reader.FieldPos(0)
			return nil, fmt.Errorf("token file %s, line %d: must have at least 3 columns (token, user name, user uid), found %d", path, line, len(record))
		}
		if record[0] == "" {
			continue
		}
		user := UserInfo{Name: record[1], UID: record[2]}
		if user.Name == "" {
			line, _ := reader.FieldPos(0)
			return nil, fmt.Errorf("token file %s, line %d: the user name (second column) is empty", path, line)
		}
		if len(record) >= 4 && record[3] != "" {
			user.Groups = strings.Split(record[3], ",")
		}
		tokens[record[0]] = user
	}
	return tokens, nil
}

// unauthorized is kube-apiserver's answer to a request it cannot
// authenticate.
func unauthorized() error {
	return apierrors.NewUnauthorized("Unauthorized")
}
