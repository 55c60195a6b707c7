package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestModelByID: GET /v1/models/{id} through the official clients:
// openai-go's Models.Get reads the OpenAI object, anthropic-sdk-go's
// Models.Get the Anthropic one; an unknown id is 404 model_not_found in
// each client's dialect (both SDKs parse the error).
func TestModelByID(t *testing.T) {
	gw, _ := front(t)
	ctx := context.Background()
	oc := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey(clientKey), option.WithMaxRetries(0))
	m, err := oc.Models.Get(ctx, "m")
	if err != nil || m.ID != "m" || m.Object != "model" || m.OwnedBy != "hopgate" {
		t.Fatalf("openai Models.Get: %+v, %v", m, err)
	}
	_, err = oc.Models.Get(ctx, "nope")
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusNotFound || oe.Code != "model_not_found" {
		t.Fatalf("openai unknown model: %v", err)
	}

	ac := anthropic.NewClient(anoption.WithBaseURL(gw.URL), anoption.WithAPIKey(clientKey), anoption.WithMaxRetries(0))
	am, err := ac.Models.Get(ctx, "m", anthropic.ModelGetParams{})
	if err != nil || am.ID != "m" || am.DisplayName != "m" {
		t.Fatalf("anthropic Models.Get: %+v, %v", am, err)
	}
	// embed-only serves no chat: not a model an Anthropic client can use.
	for _, id := range []string{"nope", "embed-only"} {
		_, err = ac.Models.Get(ctx, id, anthropic.ModelGetParams{})
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Type() != "not_found_error" {
			t.Fatalf("anthropic %s: %v", id, err)
		}
	}
}
