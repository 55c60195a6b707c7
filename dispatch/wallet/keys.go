package wallet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"sync/atomic"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/store"
)

// StoreKey is a client key issued at run time, as the snapshot holds it.
type StoreKey struct {
	ID, Tenant string
}

// keyring is the snapshot of the store's valid keys, by SHA-256. Requests
// read it without a lock; the key loop replaces it whole.
type keyring struct {
	snap atomic.Pointer[map[[32]byte]StoreKey]
}

// LookupKey finds a key issued at run time by the SHA-256 of its secret.
// loaded is false until the store's keys were read once: an unknown key
// may then be a valid one, and the caller answers 503, not 401.
//
// A map lookup is not constant time, but what it could leak is a prefix of
// the SHA-256 of a valid key, from which no key can be derived.
func (w *Wallet) LookupKey(sum [32]byte) (k StoreKey, found, loaded bool) {
	m := w.keys.snap.Load()
	if m == nil {
		return StoreKey{}, false, false
	}
	k, found = (*m)[sum]
	return k, found, true
}

// loadKeys replaces the snapshot with the store's valid keys.
func (w *Wallet) loadKeys(ctx context.Context) error {
	cctx, cancel := w.callCtx(ctx)
	defer cancel()
	recs, err := w.store.Keys(cctx)
	if err != nil {
		w.tel.Metrics.WalletStoreError(ctx, "keys")
		return err
	}
	m := make(map[[32]byte]StoreKey, len(recs))
	for _, r := range recs {
		if r.Revoked {
			continue
		}
		var sum [32]byte
		if b, err := hex.DecodeString(r.SHA256); err != nil || len(b) != len(sum) {
			continue // the store only takes 64 hex digits; defensive
		} else {
			copy(sum[:], b)
		}
		m[sum] = StoreKey{ID: r.KeyID, Tenant: r.Tenant}
	}
	w.keys.snap.Store(&m)
	return nil
}

// Refresh re-reads the store's keys now (after this replica issued or
// revoked one) and waits for it, or for ctx.
func (w *Wallet) Refresh(ctx context.Context) {
	done := make(chan struct{})
	select {
	case w.refreshes <- done:
	case <-ctx.Done():
		return
	case <-w.stop:
		_ = w.loadKeys(ctx)
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// keyLoop re-reads the keys every store.key_refresh of the config in
// force: a key revoked on any replica stops working here within that
// period (plus one store call).
func (w *Wallet) keyLoop() {
	for {
		t := w.clock.NewTimer(positive(w.cfg().Store.KeyRefresh, config.DefaultKeyRefresh))
		var done chan struct{}
		select {
		case <-w.stop:
			t.Stop()
			return
		case <-t.Chan():
		case done = <-w.refreshes:
			t.Stop()
		}
		if err := w.loadKeys(context.Background()); err != nil {
			w.log.Warn("wallet: key refresh failed; keeping the last snapshot", slog.Any("error", err))
		}
		if done != nil {
			close(done)
		}
	}
}

// KeyAdder is what IssueKey needs of the store.
type KeyAdder interface {
	AddKey(ctx context.Context, k store.KeyRecord, actor string) error
}

// KeyPrefix starts every key hopgate issues, so a leaked one is easy to
// recognise (secret scanners, logs).
const KeyPrefix = "hg-"

// IssueKey creates a client key for tenant: a random secret (256 bits)
// and a random key id. Only the secret's SHA-256 is stored; the secret is
// returned once and cannot be recovered.
func IssueKey(ctx context.Context, s KeyAdder, tenant, actor string) (keyID, secret string, err error) {
	var raw [32]byte
	var id [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(id[:]); err != nil {
		return "", "", err
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	keyID = "key-" + hex.EncodeToString(id[:])
	sum := sha256.Sum256([]byte(secret))
	if err := s.AddKey(ctx, store.KeyRecord{KeyID: keyID, Tenant: tenant, SHA256: hex.EncodeToString(sum[:])}, actor); err != nil {
		return "", "", err
	}
	return keyID, secret, nil
}
