package keyed

import (
	"sync"
	"testing"
)

type val struct {
	name   string
	policy int
}

// A value is kept while its policy is the same, replaced when it changes;
// concurrent first uses create it once; All is sorted by channel id.
func TestSet(t *testing.T) {
	created := 0
	var mu sync.Mutex
	s := New(func(name string, p int) *val {
		mu.Lock()
		created++
		mu.Unlock()
		return &val{name, p}
	})
	if s.Lookup("a") != nil {
		t.Fatal("Lookup of an unknown channel must be the zero value")
	}
	var wg sync.WaitGroup
	got := make([]*val, 8)
	for i := range got {
		wg.Go(func() { got[i] = s.Get("b", 1) })
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatal("concurrent first uses got different values")
		}
	}
	if created != 1 {
		t.Fatalf("created %d values for one channel", created)
	}
	a := s.Get("a", 1)
	if s.Get("a", 1) != a || s.Lookup("a") != a {
		t.Fatal("same policy: the value must be kept")
	}
	if a2 := s.Get("a", 2); a2 == a || a2.policy != 2 || s.Lookup("a") != a2 {
		t.Fatal("changed policy: the value must be replaced")
	}
	all := s.All()
	if len(all) != 2 || all[0].name != "a" || all[1].name != "b" {
		t.Fatalf("All = %+v, want a then b", all)
	}
}

// Why: a reload that removes channels must not leave their state behind
// (a gateway reloaded many times would keep every channel it ever had),
// and must not touch the state of the channels it keeps.
func TestRetain(t *testing.T) {
	s := New(func(name string, p int) *val { return &val{name, p} })
	a, b, c := s.Get("a", 1), s.Get("b", 1), s.Get("c", 2)
	s.Retain(func(name string) bool { return name != "b" })
	if s.Lookup("b") != nil {
		t.Fatal("a dropped channel's value is still there")
	}
	if s.Lookup("a") != a || s.Lookup("c") != c || s.Get("a", 1) != a || s.Get("c", 2) != c {
		t.Fatal("Retain replaced the value of a kept channel")
	}
	if all := s.All(); len(all) != 2 || all[0] != a || all[1] != c {
		t.Fatalf("All = %+v, want a then c", all)
	}
	if b2 := s.Get("b", 1); b2 == b {
		t.Fatal("a channel added back got its old value, not a fresh one")
	}
}
