package dispatch

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/tokens"
)

// POST /v1/messages/count_tokens (DESIGN.md §14) walks the model's chain
// like a request: open channels are skipped, the header timeout bounds
// each hop, a failed hop moves on; but no outcome reaches a breaker
// (recordBreaker) or early warning, and the request is never charged
// (package api reserves nothing for it). Anthropic-family entries count
// upstream (provider.countURL); an OpenAI-family entry has no such API and
// counts locally with o200k_base (package tokens), saying so.

// EstimatedHeader marks a count made by hopgate's own tokenizer.
const EstimatedHeader = "X-Hopgate-Estimated"

// countLocally answers a count_tokens hop on an OpenAI-family channel
// without sending anything (a function: attempt has its share of
// methods, TestShape).
func countLocally(a *attempt) *classify.HopError {
	c := a.c
	n, err := tokens.Messages(c.req.Body)
	if err != nil {
		// The body parsed at the front door as an object; one that is no
		// Messages request is the client's.
		e := &classify.HopError{Kind: classify.KindUnsupported, Status: http.StatusBadRequest, Cause: err, ContentType: "application/json"}
		e.Body = errorBody(c.req, c.requestID, invalidCount(err), "")
		return e
	}
	b := countBody(n)
	g, ok := c.claimAnswer(a.ch.ID, "ok")
	if !ok {
		return c.lostCommit()
	}
	a.status = http.StatusOK
	c.rw.w.Header().Set(EstimatedHeader, "1")
	c.rw.writeHead(head{status: http.StatusOK, contentType: "application/json", length: int64(len(b))}, &g)
	_ = c.rw.write(b)
	return a.succeed()
}

// countBody is Anthropic's count_tokens answer.
func countBody(n int64) []byte {
	return append(strconv.AppendInt([]byte(`{"input_tokens":`), n, 10), '}')
}

// invalidCount is the refusal of a count_tokens body no tokenizer reads.
func invalidCount(err error) *apierror.Error {
	return apierror.InvalidRequest("count_tokens takes a Messages request (system, messages, tools): "+err.Error(), "")
}

// countAnswer reads an upstream count: Anthropic's and Vertex's
// {"input_tokens":N}, Bedrock's {"inputTokens":N}; the client gets
// Anthropic's shape. Anything else is a failed hop.
func countAnswer(b []byte) ([]byte, gate.Info, error) {
	var v struct {
		InputTokens  *int64 `json:"input_tokens"`
		BedrockCount *int64 `json:"inputTokens"`
	}
	if json.Unmarshal(b, &v) != nil {
		return nil, gate.Info{Kind: gate.Malformed}, nil
	}
	switch {
	case v.InputTokens != nil:
		return b, gate.Info{}, nil
	case v.BedrockCount != nil:
		return countBody(*v.BedrockCount), gate.Info{}, nil
	}
	return nil, gate.Info{Kind: gate.Malformed}, nil
}
