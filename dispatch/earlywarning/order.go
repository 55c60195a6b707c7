package earlywarning

import "time"

// Member is one chain entry as Order sees it.
type Member struct {
	Detector *Detector // nil: early warning is off for this channel
	Closed   bool      // the channel's breaker is closed: it can serve now
}

// Move is a demoted entry that Order moved to the end of the chain.
type Move struct {
	Index          int // in the members as given (the configured order)
	Reason, Detail string
	Until          time.Time // when the demotion ends
}

// maxMembers bounds a chain Order reorders; chains hold at most 3 entries
// (ROUTING_CHAIN_MAX), a longer one is left as it is.
const maxMembers = 8

// Plan is the order to try a chain in. Its arrays back the slices, so a
// Plan kept in the caller's per-request object costs no allocation.
type Plan struct {
	Order []int  // indexes into the members, in the order to try them
	Moves []Move // the demoted entries moved to the end, in configured order
	order [maxMembers]int
	moves [maxMembers]Move
}

// Order decides the order in which to try a chain whose entries are ms
// (cheapest first, as configured), demoting members whose evidence has
// lasted long enough, and moving demoted members behind the others.
//
// Two guards keep a demotion from doing harm:
//   - a member is demoted, and a demoted member is moved, only when some
//     other member could serve in its place: its breaker closed, not
//     demoted, its own evidence clean. When every other channel of the
//     chain looks the same, the chain is slow, not the channel (a slow
//     day is not an outage); when the others are open or demoted, the
//     member is the last healthy one and keeps its place;
//   - nothing is ever skipped: a moved member is still tried, last.
//
// A member with no data at all (a backup that gets no traffic) has clean
// evidence, as a breaker with no failures is closed.
func Order(p *Plan, ms []Member) {
	p.Order, p.Moves = p.order[:0], p.moves[:0]
	if len(ms) > maxMembers {
		for i := range ms {
			p.Order = append(p.Order, i)
		}
		return
	}
	var views [maxMembers]view
	for i, m := range ms {
		if m.Detector != nil {
			views[i] = m.Detector.look()
		}
	}
	available := func(j int) bool {
		return ms[j].Closed && views[j].state != Demoted && !views[j].suspect
	}
	otherAvailable := func(i int) bool {
		for j := range ms {
			if j != i && available(j) {
				return true
			}
		}
		return false
	}
	for i, m := range ms {
		if v := views[i]; v.suspect && v.state != Demoted && otherAvailable(i) {
			views[i] = m.Detector.demote(v.reason, v.detail)
		}
	}
	var moved [maxMembers]bool
	for i := range ms {
		moved[i] = views[i].state == Demoted && otherAvailable(i)
		if !moved[i] {
			p.Order = append(p.Order, i)
		}
	}
	for i := range ms {
		if moved[i] {
			p.Order = append(p.Order, i)
			v := views[i]
			p.Moves = append(p.Moves, Move{Index: i, Reason: v.reason, Detail: v.detail, Until: v.until})
		}
	}
}
