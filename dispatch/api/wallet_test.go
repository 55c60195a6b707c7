package api

import (
	"testing"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/reqbody"
)

// Why: a hold is sized from the request's own token limit; embeddings,
// which produce no output, reserve none (not the model's 4096-token
// default, which would refuse small wallets for nothing).
func TestReservationSizing(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":64,"input":"x"}`)
	f, err := reqbody.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	chat := reservationSizing(&dispatch.Request{Operation: config.OpChat, Body: body, Fields: f})
	if chat.BodyBytes != len(body) || chat.MaxTokens != 64 || !chat.MaxTokensPresent {
		t.Errorf("chat %+v", chat)
	}
	emb := reservationSizing(&dispatch.Request{Operation: config.OpEmbeddings, Body: body})
	if emb.MaxTokens != 0 || !emb.MaxTokensPresent || emb.BodyBytes != len(body) {
		t.Errorf("embeddings %+v", emb)
	}
}
