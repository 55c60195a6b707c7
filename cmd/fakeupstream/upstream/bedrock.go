package upstream

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// bedrockRoute reads /model/{modelId}/invoke[-with-response-stream]. The
// model id is one escaped segment: an inference-profile ARN arrives with
// its "/" as %2F.
func bedrockRoute(esc string) target {
	t := target{dialect: DialectBedrock}
	id, op, ok := strings.Cut(strings.TrimPrefix(esc, "/model/"), "/")
	model := unescapeSegment(id)
	switch {
	case !ok || model == "":
	case op == "invoke":
		t.ep, t.found, t.model = messagesEndpoint, true, model
	case op == "invoke-with-response-stream":
		t.ep, t.found, t.model, t.stream = messagesEndpoint, true, model, true
	case op == "count-tokens":
		t.ep, t.found, t.model = countEndpoint, true, model
	}
	return t
}

// sigV4 is a parsed "Authorization: AWS4-HMAC-SHA256 Credential=...,
// SignedHeaders=..., Signature=..." header.
type sigV4 struct {
	AccessKey, Date, Region, Service string
	SignedHeaders                    []string
	Signature                        string
}

var errSigV4 = errors.New("malformed SigV4 Authorization header")

// parseSigV4 reads a SigV4 Authorization header value (untrusted bytes).
func parseSigV4(h string) (sigV4, error) {
	rest, ok := strings.CutPrefix(h, "AWS4-HMAC-SHA256 ")
	if !ok {
		return sigV4{}, errSigV4
	}
	var s sigV4
	var cred string
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return sigV4{}, errSigV4
		}
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			s.SignedHeaders = strings.Split(v, ";")
		case "Signature":
			s.Signature = v
		default:
			return sigV4{}, errSigV4
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || s.Signature == "" || len(s.SignedHeaders) == 0 {
		return sigV4{}, errSigV4
	}
	s.AccessKey, s.Date, s.Region, s.Service = scope[0], scope[1], scope[2], scope[3]
	return s, nil
}

const amzDateFormat = "20060102T150405Z"

// bedrockAuthorized verifies the request's SigV4 signature the way AWS
// does: the access key must be known, the scope must be bedrock in the
// configured region, and the signature recomputed with the SDK's own
// signer over the signed headers and the body must match.
func (ex *exchange) bedrockAuthorized() bool {
	o := ex.s.opts
	const (
		coral        = ":http://internal.amazon.com/coral/com.amazon.coral.service/"
		badSignature = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	)
	deny := func(typ, msg string) bool {
		ex.w.Header().Set("X-Amzn-Errortype", typ+coral)
		writeBody(ex.w, http.StatusForbidden, "application/json", mustJSON(map[string]string{"message": msg}))
		return false
	}
	h := ex.r.Header.Get("Authorization")
	if h == "" {
		return deny("MissingAuthenticationTokenException", "Missing Authentication Token")
	}
	sig, err := parseSigV4(h)
	if err != nil {
		return deny("IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters. Authorization="+h)
	}
	if sig.AccessKey != o.AWSAccessKeyID || ex.r.Header.Get("X-Amz-Security-Token") != o.AWSSessionToken {
		return deny("UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	if sig.Service != "bedrock" {
		return deny("InvalidSignatureException", "Credential should be scoped to correct service: 'bedrock'. ")
	}
	if sig.Region != o.AWSRegion {
		return deny("InvalidSignatureException", "Credential should be scoped to a valid region. ")
	}
	amzDate := ex.r.Header.Get("X-Amz-Date")
	t, err := time.Parse(amzDateFormat, amzDate)
	if err != nil || !slices.Contains(sig.SignedHeaders, "x-amz-date") {
		return deny("IncompleteSignatureException", "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
	}
	if t.Format("20060102") != sig.Date {
		return deny("InvalidSignatureException", "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '"+sig.Date+"' != '"+t.Format("20060102")+"', from '"+amzDate+"'.")
	}
	if skew := o.AWSMaxSkew; skew > 0 && (ex.now.Sub(t) > skew || t.Sub(ex.now) > skew) {
		return deny("InvalidSignatureException", "Signature expired: "+amzDate+" is now earlier than "+ex.now.Add(-skew).UTC().Format(amzDateFormat)+" ("+ex.now.UTC().Format(amzDateFormat)+" - "+skew.String()+".)")
	}
	want, err := ex.resign(sig, t)
	if err != nil || !hmac.Equal([]byte(want), []byte(sig.Signature)) {
		return deny("InvalidSignatureException", badSignature)
	}
	return true
}

// resign signs a copy of the request holding only the headers the client
// said it signed, with the configured secret, and returns the signature.
func (ex *exchange) resign(sig sigV4, t time.Time) (string, error) {
	u, err := url.ParseRequestURI(ex.r.RequestURI)
	if err != nil {
		return "", err
	}
	req := &http.Request{Method: ex.r.Method, URL: u, Host: ex.r.Host, Header: http.Header{}}
	for _, name := range sig.SignedHeaders {
		switch name {
		case "host":
		case "content-length":
			req.ContentLength = ex.r.ContentLength
		default:
			req.Header[http.CanonicalHeaderKey(name)] = ex.r.Header.Values(name)
		}
	}
	sum := sha256.Sum256(ex.raw)
	o := ex.s.opts
	creds := aws.Credentials{AccessKeyID: o.AWSAccessKeyID, SecretAccessKey: o.AWSSecretAccessKey, SessionToken: o.AWSSessionToken}
	if err := ex.s.signer.SignHTTP(ex.ctx, creds, req, hex.EncodeToString(sum[:]), sig.Service, sig.Region, t); err != nil {
		return "", err
	}
	again, err := parseSigV4(req.Header.Get("Authorization"))
	return again.Signature, err
}

// bedrockStatusErrors are the exceptions Bedrock answers with each status.
var bedrockStatusErrors = map[int]struct{ typ, msg string }{
	400: {"ValidationException", "Malformed input request, please reformat your input and try again."},
	403: {"AccessDeniedException", "You don't have access to the model with the specified model ID."},
	404: {"ResourceNotFoundException", "Could not resolve the foundation model from the provided model identifier."},
	408: {"ModelTimeoutException", "Model has timed out in processing the request. Try your request again."},
	424: {"ModelErrorException", "The model returned an error. Try your request again."},
	429: {"ThrottlingException", "Too many requests, please wait before trying again."},
	500: {"InternalServerException", "The server encountered an internal error while processing the request."},
	503: {"ServiceUnavailableException", "Bedrock is unable to process your request."},
}

// bedrockStatus writes a status as a Bedrock exception; msg "" uses the
// exception's usual message.
func (ex *exchange) bedrockStatus(status int, msg string) {
	e, ok := bedrockStatusErrors[status]
	if !ok {
		e = bedrockStatusErrors[400]
		if status >= 500 {
			e = bedrockStatusErrors[500]
		}
	}
	if msg == "" {
		msg = e.msg
	}
	ex.bedrockError(status, e.typ, msg)
}

// bedrockError writes an AWS REST-JSON error: the exception name in
// X-Amzn-Errortype (with the namespace suffix the SDK strips), the message
// in the body.
func (ex *exchange) bedrockError(status int, typ, msg string) {
	ex.w.Header().Set("X-Amzn-Errortype", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	writeBody(ex.w, status, "application/json", mustJSON(map[string]string{"message": msg}))
}

// bedrockStreamExceptions are the exception events of
// InvokeModelWithResponseStream, with their usual messages.
var bedrockStreamExceptions = map[string]string{
	"internalServerException":     "The server encountered an internal error while processing the request.",
	"modelStreamErrorException":   "The model stream encountered an error.",
	"validationException":         "The model stream was cancelled: the request is invalid.",
	"throttlingException":         "Too many requests, please wait before trying again.",
	"modelTimeoutException":       "Model has timed out in processing the request.",
	"serviceUnavailableException": "Bedrock is unable to process your request.",
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// bedrockEndlessBytes is the size of the event-stream message the endless
// faults start and never finish.
const bedrockEndlessBytes = 256 << 10

// bedrockFraming carries Anthropic events in the AWS event-stream binary
// framing, encoded by the SDK's encoder: one "chunk" event per Anthropic
// event, its JSON base64 in {"bytes":...}; in-stream errors are exception
// messages; message_stop carries Bedrock's invocation metrics.
func (ex *exchange) bedrockFraming(a anthropicAnswer) anthropicFraming {
	enc := eventstream.NewEncoder()
	encode := func(headers eventstream.Headers, payload []byte) []byte {
		var b bytes.Buffer
		if err := enc.Encode(&b, eventstream.Message{Headers: headers, Payload: payload}); err != nil {
			panic("fakeupstream: event-stream encode: " + err.Error()) // only for payloads over 16 MiB
		}
		return b.Bytes()
	}
	chunk := func(_ string, event []byte) []byte {
		var hs eventstream.Headers
		hs.Set(":event-type", eventstream.StringValue("chunk"))
		hs.Set(":content-type", eventstream.StringValue("application/json"))
		hs.Set(":message-type", eventstream.StringValue("event"))
		// Bedrock pads every chunk with "p" so sizes do not leak the text.
		return encode(hs, mustJSON(map[string]string{"bytes": base64.StdEncoding.EncodeToString(event), "p": "abcdefghij"}))
	}
	exception := func(bool) []byte {
		typ := ex.streamErrorType()
		var hs eventstream.Headers
		hs.Set(":exception-type", eventstream.StringValue(typ))
		hs.Set(":content-type", eventstream.StringValue("application/json"))
		hs.Set(":message-type", eventstream.StringValue("exception"))
		return encode(hs, mustJSON(map[string]string{"message": bedrockStreamExceptions[typ]}))
	}
	// malformed: a well-formed chunk whose message CRC is wrong.
	bad := chunk("", []byte(`{"type":"ping"}`))
	bad[len(bad)-1] ^= 0xff
	// endless: an event whose declared length is never delivered.
	long := encode(nil, bytes.Repeat([]byte("x"), bedrockEndlessBytes))
	long = long[:len(long)-4]
	ex.w.Header().Set("X-Amzn-Bedrock-Content-Type", "application/json")
	return anthropicFraming{
		enc: chunk, errFrame: exception, malformed: bad,
		endless: long, endlessMax: len(long),
		contentType: "application/vnd.amazon.eventstream",
		stopExtra: func() map[string]any {
			return map[string]any{"amazon-bedrock-invocationMetrics": map[string]int{
				"inputTokenCount": a.usage.InputTokens, "outputTokenCount": a.usage.OutputTokens,
				"invocationLatency": 420, "firstByteLatency": 120,
			}}
		},
	}
}

// newSigner is the SigV4 signer the bedrock dialect verifies with.
func newSigner() *v4.Signer { return v4.NewSigner() }
