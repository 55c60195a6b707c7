package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/hopgate/hopgate/dispatch/config"
)

// authenticate returns the id of the client key presented in Authorization,
// or ok=false. Only sha256 hashes of keys are held; every stored hash is
// compared in constant time, without early exit, so timing reveals neither
// which key matched nor how much of it.
func authenticate(cfg *config.Config, r *http.Request) (id string, ok bool) {
	if cfg.Auth.Mode == config.AuthNone {
		return "", true
	}
	key := ""
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	switch {
	case len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix):
		key = strings.TrimSpace(h[len(prefix):])
	case h == "":
		// Anthropic's clients send the key as x-api-key.
		key = strings.TrimSpace(r.Header.Get("X-Api-Key"))
	}
	if key == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(key))
	match := 0
	for i := range cfg.Auth.Keys {
		k := &cfg.Auth.Keys[i]
		if subtle.ConstantTimeCompare(sum[:], k.SHA256[:]) == 1 {
			match = i + 1
		}
	}
	if match == 0 {
		return "", false
	}
	return cfg.Auth.Keys[match-1].ID, true
}
