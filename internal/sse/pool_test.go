package sse

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// drainPools empties the free lists, so a test sees only what it released.
func drainPools() {
	for {
		select {
		case <-idleReaders:
		case <-idleSmall:
		case <-idleBurst:
		default:
			return
		}
	}
}

// TestGetReleaseKeepsNoState: a recycled reader and its buffer start the
// next stream clean, whatever the stream before left in them (a partial
// frame, an undecided BOM, a sticky error, a too-large frame, a burst
// buffer full of its bytes), and the next stream's frames are its own.
func TestGetReleaseKeepsNoState(t *testing.T) {
	burst := strings.Repeat("data: "+strings.Repeat("a", 200)+"\n\n", 60) // fills a burst buffer
	next := "\xEF\xBB\xBFevent: b\ndata: bb\n\ndata: c\r\n\r\n"
	for _, tc := range []struct {
		name   string
		before io.Reader
		reads  int // frames read before the release (-1: to the end)
	}{
		// Why: a burst leaves 16 KiB of its frames in the buffer reused next.
		{"after a burst", strings.NewReader(burst), -1},
		// Why: a release mid-frame must not hand its bytes to the next stream.
		{"mid-frame", &chunks{"data: a\n\ndata: par"}, 1},
		// Why: the BOM decision and the sticky error are per stream.
		{"undecided BOM", &chunks{"\xEF"}, 0},
		{"read error", io.MultiReader(strings.NewReader("data: x\n\ndata"), iotestErr{}), -1},
		// Why: a too-large frame ends that stream only.
		{"frame too large", strings.NewReader("data: " + strings.Repeat("z", 200)), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drainPools()
			rd := Get(tc.before, 100)
			if tc.name != "frame too large" {
				rd.maxFrame = DefaultMaxFrame
			}
			for i := 0; tc.reads < 0 || i < tc.reads; i++ {
				if _, err := rd.Next(); err != nil {
					break
				}
			}
			old := rd.buf
			rd.Release()
			again := Get(strings.NewReader(next), 0)
			if again != rd {
				t.Fatal("the released reader was not reused")
			}
			if cap(old) == burstBuf || cap(old) == initialBuf {
				if b := getBuf(cap(old)); &b[0] != &old[0] {
					t.Fatal("the released buffer was not kept")
				} else {
					putBuf(b)
				}
			}
			got, err := readAll(t, again)
			check(t, tc.name, got, err, refFrames([]byte(next)), io.EOF)
			again.Release()
		})
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestGetKeepsTheLimit: a recycled reader takes the limit it is got with.
func TestGetKeepsTheLimit(t *testing.T) {
	drainPools()
	rd := Get(strings.NewReader("data: x\n\n"), 10)
	rd.Release()
	rd = Get(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 0)
	if _, err := rd.Next(); err != nil {
		t.Fatalf("limit of the reader before kept: %v", err)
	}
	rd.Release()
	rd = Get(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 10)
	if _, err := rd.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("limit 10: %v", err)
	}
}

// TestPutBufKeepsOnlyItsSizes: a buffer grown by doubling for a large
// frame is not kept, and a full free list drops what is given back.
func TestPutBufKeepsOnlyItsSizes(t *testing.T) {
	drainPools()
	putBuf(make([]byte, 2*initialBuf))
	putBuf(nil)
	if len(idleSmall)+len(idleBurst) != 0 {
		t.Fatal("a buffer of another size was kept")
	}
	for range maxIdleBurst + 5 {
		putBuf(make([]byte, burstBuf))
	}
	if len(idleBurst) != maxIdleBurst {
		t.Fatalf("%d burst buffers kept, want %d", len(idleBurst), maxIdleBurst)
	}
	drainPools()
}

// TestReleasedBufferHasOneOwner: two readers got after a release, read in
// turns, each get their own frames: a released buffer is either the
// recycled reader's or on the free list, never both.
func TestReleasedBufferHasOneOwner(t *testing.T) {
	drainPools()
	burst := func(tok string) string {
		return strings.Repeat("data: "+strings.Repeat(tok, 200)+"\n\n", 60)
	}
	rd := Get(strings.NewReader(burst("a")), 0)
	if _, err := readAll(t, rd); err != io.EOF {
		t.Fatal(err)
	}
	rd.Release()
	x, y := Get(&chunks{burst("x")}, 0), Get(&chunks{burst("y")}, 0)
	for i := 0; ; i++ {
		fx, errx := x.Next()
		fy, erry := y.Next()
		if errx != nil || erry != nil {
			if errx != io.EOF || erry != io.EOF || i != 60 {
				t.Fatalf("frame %d: %v, %v", i, errx, erry)
			}
			break
		}
		if string(fx.Data) != strings.Repeat("x", 200) || string(fy.Data) != strings.Repeat("y", 200) {
			t.Fatalf("frame %d: %.20q and %.20q", i, fx.Data, fy.Data)
		}
	}
	x.Release()
	y.Release()
}
