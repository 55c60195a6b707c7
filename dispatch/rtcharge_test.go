package dispatch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"

	"github.com/hopgate/hopgate/internal/testkit"
)

// A response.done the channel sent is charged even when its write to the
// client fails (a client that had just hung up): the channel billed it.
// It went to the ledger only after a successful write.
func TestResponseDoneChargedWhenClientGone(t *testing.T) {
	accepted := make(chan *websocket.Conn, 1)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		accepted <- c
		<-stop // a hijacked connection's handler: held until the test ends
	}))
	defer srv.Close()
	defer close(stop)
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	peer, _, err := websocket.Dial(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.CloseNow()
	client := testkit.Recv(t, accepted, "the accepted socket")
	_ = client.CloseNow() // gone: every write to it fails

	var got []ResponseDone
	s := &session{client: client, writes: ctx, upClosing: true, closeCode: -1,
		onDone: func(d ResponseDone) { got = append(got, d) }}
	a := &rtAttempt{attempt: &attempt{c: &call{rt: s}}}
	done := []byte(`{"type":"response.done","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}}`)
	if a.toClient(websocket.MessageText, done) {
		t.Fatal("a write to a closed socket succeeded")
	}
	if len(got) != 1 || got[0].ResponseID != "resp_1" || got[0].InputTokens != 10 || got[0].OutputTokens != 20 {
		t.Fatalf("charged %+v, want resp_1 with 10 + 20 tokens", got)
	}
}
