package otlpwire

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Why: a body's length is written after the body (beginLen, endLen), in
// room guessed before it. Whatever the guess, the field must be what a
// size pass would have written: the tag, the minimal varint of the size,
// the body unchanged, and what came before it untouched. Sizes sit on
// both sides of each varint width.
func TestLenAfterBody(t *testing.T) {
	for _, size := range []int{0, 1, 127, 128, 129, 16383, 16384, 16385, 1<<21 - 1, 1 << 21} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i * 7)
		}
		want := protowire.AppendBytes(protowire.AppendTag([]byte("prefix"), 9, protowire.BytesType), body)
		for guess := 1; guess <= 4; guess++ {
			b, start := beginLen([]byte("prefix"), 9, guess)
			b = append(b, body...)
			b = endLen(b, start, guess)
			if !bytes.Equal(b, want) {
				t.Fatalf("size %d, guess %d: %d bytes, want %d (a size pass's)", size, guess, len(b), len(want))
			}
		}
	}
}
