package registry

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
)

// continueToken is kube-apiserver's continue token (storage/continue.go),
// so clients that peek into it see what they expect.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

// encodeContinue returns the token for a list continuing at start (relative
// to the list prefix) at revision rev; rev -1 means "at the latest revision".
func encodeContinue(start string, rev int64) string {
	data, err := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rev, StartKey: start})
	if err != nil {
		panic(fmt.Sprintf("encode continue token: %v", err)) // a struct of a string and an int always encodes
	}
	return base64.RawURLEncoding.EncodeToString(data)
}

// decodeContinue checks a token as kube-apiserver does; the start key can
// never climb above the list prefix.
func decodeContinue(token string) (start string, rev int64, err error) {
	data, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", 0, fmt.Errorf("continue key is not valid: %w", err)
	}
	var c continueToken
	if err := json.Unmarshal(data, &c); err != nil {
		return "", 0, fmt.Errorf("continue key is not valid: %w", err)
	}
	if c.APIVersion != "meta.k8s.io/v1" {
		return "", 0, fmt.Errorf("continue key is not valid: server does not recognize this encoded version %q", c.APIVersion)
	}
	if c.ResourceVersion == 0 {
		return "", 0, errors.New("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	}
	if c.StartKey == "" {
		return "", 0, errors.New("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
	}
	key := "/" + strings.TrimPrefix(c.StartKey, "/")
	if path.Clean(key) != key {
		return "", 0, fmt.Errorf("continue key is not valid: %s", c.StartKey)
	}
	return key[1:], c.ResourceVersion, nil
}
