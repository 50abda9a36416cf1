package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/registry"
)

// objects is a Getter of fixed objects: the token logic alone, without a
// store (the apiserver and e2e tests run it over etcd).
type objects map[string]registry.Object

func (o objects) Get(_ context.Context, namespace, name string) (registry.Object, error) {
	if obj, ok := o[namespace+"/"+name]; ok {
		return obj, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("serviceaccounts"), name)
}

// TestTokenLifetimeBoundaries: a token authenticates from a minute before
// its nbf (jwt's leeway, as kube's validator) to a minute after its exp,
// and not beyond, with kube's messages.
func TestTokenLifetimeBoundaries(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sas := objects{"team/robot": &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot", Namespace: "team", UID: "uid-robot"}}}
	const issuer, audience = "https://concord.example", "https://concord.example"
	iss, err := NewIssuer(IssuerConfig{Issuer: issuer, Key: key, APIAudiences: []string{audience}, ServiceAccounts: sas, Secrets: objects{}})
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	iss.now = func() time.Time { return issued }
	ten := int64(600)
	resp, err := iss.Request(context.Background(), "team", "robot", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ten}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Status.ExpirationTimestamp.Time, issued.Add(10*time.Minute); !got.Equal(want) {
		t.Fatalf("expirationTimestamp %s; want %s", got, want)
	}
	authn, err := NewAuthenticator(AuthenticatorConfig{Issuers: []string{issuer}, Keys: []crypto.PublicKey{key.Public()}, APIAudiences: []string{audience}, ServiceAccounts: sas, Secrets: objects{}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		at      time.Duration // after issue
		wantErr string
	}{
		{"at issue", 0, ""},
		{"just before expiry", 599 * time.Second, ""},
		{"within the leeway after expiry", 659 * time.Second, ""},
		{"beyond the leeway after expiry", 661 * time.Second, "service account token has expired"},
		{"within the leeway before issue", -59 * time.Second, ""},
		{"beyond the leeway before issue", -61 * time.Second, "service account token is not valid yet"},
	}
	for _, tc := range cases {
		authn.now = func() time.Time { return issued.Add(tc.at) }
		user, ok, err := authn.AuthenticateToken(context.Background(), resp.Status.Token)
		switch {
		case tc.wantErr == "" && (err != nil || !ok):
			t.Errorf("%s: ok %v, err %v; want the ServiceAccount", tc.name, ok, err)
		case tc.wantErr == "" && (user.Name != "system:serviceaccount:team:robot" || user.UID != "uid-robot"):
			t.Errorf("%s: user %q uid %q; want system:serviceaccount:team:robot, uid-robot", tc.name, user.Name, user.UID)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: ok %v, err %v; want %q", tc.name, ok, err, tc.wantErr)
		}
	}
}
