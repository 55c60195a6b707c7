package upstream

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
)

// DefaultDimensions is the embedding length when the request sets none.
const DefaultDimensions = 8

// Embedding is the deterministic vector the fake returns for input: values
// in [-1, 1) derived from sha256, so tests can compare exact numbers.
func Embedding(input string, dims int) []float64 {
	out := make([]float64, dims)
	var block [32]byte
	for i := range out {
		if i%8 == 0 {
			var ctr [8]byte
			binary.BigEndian.PutUint64(ctr[:], uint64(i/8))
			block = sha256.Sum256(append(ctr[:], input...))
		}
		u := binary.BigEndian.Uint32(block[(i%8)*4:])
		// Round to 6 decimals so the JSON form is short and stable.
		out[i] = math.Round((float64(u)/(1<<31)-1)*1e6) / 1e6
	}
	return out
}

// SpeechAudio is the deterministic "MP3" the fake returns for input: an ID3
// tag followed by bytes derived from sha256(input), 256 bytes per token.
func SpeechAudio(input string, tokens int) []byte {
	out := append(make([]byte, 0, 10+256*tokens), "ID3\x04\x00\x00\x00\x00\x00\x00"...)
	sum := sha256.Sum256([]byte(input))
	for len(out) < 10+256*tokens {
		out = append(out, sum[:]...)
		sum = sha256.Sum256(sum[:])
	}
	return out
}

func serveEmbeddings(ex *exchange) {
	dims := ex.req.Dimensions
	if dims <= 0 || dims > 8192 {
		dims = DefaultDimensions
	}
	data := make([]map[string]any, 0, len(ex.req.Inputs))
	for i, in := range ex.req.Inputs {
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": Embedding(in, dims)})
	}
	p := ex.req.promptTokens()
	ex.body("application/json", mustJSON(map[string]any{
		"object": "list", "data": data, "model": ex.model,
		"usage": map[string]int{"prompt_tokens": p, "total_tokens": p},
	}))
}

func serveImages(ex *exchange) {
	n := min(max(ex.req.N, 1), 10)
	prompt := ""
	if len(ex.req.Inputs) > 0 {
		prompt = ex.req.Inputs[0]
	}
	data := make([]map[string]any, n)
	for i := range data {
		img := append([]byte("\x89PNG\r\n\x1a\n"), SpeechAudio(prompt+"#"+itoa(i), 1)[10:]...)
		data[i] = map[string]any{"b64_json": base64.StdEncoding.EncodeToString(img), "revised_prompt": prompt}
	}
	ex.body("application/json", mustJSON(map[string]any{"created": ex.now.Unix(), "data": data}))
}

func serveSpeech(ex *exchange) {
	input := ""
	if len(ex.req.Inputs) > 0 {
		input = ex.req.Inputs[0]
	}
	ex.body("audio/mpeg", SpeechAudio(input, ex.fault.Tokens))
}

// serveTranscription answers the sha256 of the uploaded file (FileDigest).
func serveTranscription(ex *exchange) {
	ex.body("application/json", mustJSON(map[string]any{"text": FileDigest(ex.req.File)}))
}

func serveModels(w http.ResponseWriter, s *Server) {
	data := make([]map[string]any, len(s.opts.Models))
	for i, m := range s.opts.Models {
		data[i] = map[string]any{"id": m, "object": "model", "created": 0, "owned_by": s.opts.Name}
	}
	writeBody(w, http.StatusOK, "application/json", mustJSON(map[string]any{"object": "list", "data": data}))
}
