package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/hopgate/hopgate/dispatch/config"
)

// keySum is the sha256 of the client key the request presents:
// Authorization: Bearer <key>, or x-api-key when there is no Authorization
// header (Anthropic's clients send it so).
func keySum(r *http.Request) ([32]byte, bool) {
	key := ""
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	switch {
	case len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix):
		key = strings.TrimSpace(h[len(prefix):])
	case h == "":
		key = strings.TrimSpace(r.Header.Get("X-Api-Key"))
	}
	if key == "" {
		return [32]byte{}, false
	}
	return sha256.Sum256([]byte(key)), true
}

// configKey returns the config key whose hash is sum; nil when none
// matches. Only sha256 hashes of keys are held; every stored hash is
// compared in constant time, without early exit, so timing reveals neither
// which key matched nor how much of it.
func configKey(cfg *config.Config, sum [32]byte) *config.Key {
	match := 0
	for i := range cfg.Auth.Keys {
		k := &cfg.Auth.Keys[i]
		if subtle.ConstantTimeCompare(sum[:], k.SHA256[:]) == 1 {
			match = i + 1
		}
	}
	if match == 0 {
		return nil
	}
	return &cfg.Auth.Keys[match-1]
}
