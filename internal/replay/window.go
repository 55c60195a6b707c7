package replay

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The window-fill scenario (DESIGN.md §16, issue 33): the post-mortem's
// incident, where one enterprise tenant's heavy load filled a provider's
// rate-limit window for everyone. The cheap provider allows windowQuota
// requests per minute (fixed windows) to the account the gateway shares
// with that tenant, and states its window on every answer, the way OpenAI
// does (x-ratelimit-{limit,remaining,reset}-requests). The replay's own
// traffic (2 per second) is the other tenants'; the enterprise tenant's
// load comes on top in steps, first short of the quota (a busy window is
// not a full one), then past it.

// windowQuota is the provider's requests per minute.
const windowQuota = 1000

// enterpriseLoad is the enterprise tenant's requests per minute at at.
func enterpriseLoad(at time.Duration) float64 {
	switch {
	case at < 3*time.Minute:
		return 650 // with the others' 120: 77 % of the quota by the window's end
	case at < 6*time.Minute:
		return 820 // 94 %: busy, never refused
	case at < 11*time.Minute:
		return 1300 // 142 %: the window is full 42 s into each minute
	}
	return 300
}

// windowState is what the cheap provider states on one answer.
type windowState struct {
	set              bool
	limit, remaining int
	resetIn          time.Duration // unscaled
}

// header writes the window as OpenAI does; scale shortens the reset like
// the scenario's time (the short mode).
func (st windowState) header(h http.Header, scale float64) {
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(st.limit))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(st.remaining))
	h.Set("X-Ratelimit-Reset-Requests", time.Duration(float64(st.resetIn)*scale).Round(time.Millisecond).String())
}

var windowFill = Scenario{
	Name:  "window-fill",
	Title: "one tenant's load fills the provider's rate-limit window",
	Story: fmt.Sprintf("The provider allows %d requests per minute (fixed windows) and states its window on every answer "+
		"(`x-ratelimit-*-requests`). The gateway's traffic is the other tenants' 120 per minute; an enterprise tenant's load "+
		"comes on top: 650 per minute for 3 minutes (77 %% of the quota by each window's end), 820 for 3 (94 %%: busy, never refused), "+
		"1,300 for 5 (the window is full 42 s into each minute; the provider answers 429 with its window headers and no Retry-After until it resets), "+
		"then 300 for 3. 14 minutes.", windowQuota),
	Length: 14 * time.Minute,
	cheap: func(s *script, at time.Duration) string {
		w := int64(at / time.Minute)
		if w != s.window {
			s.window, s.windowUsed = w, 0
		}
		into := at - time.Duration(w)*time.Minute
		s.windowUsed++
		used := s.windowUsed + int(enterpriseLoad(at)*into.Seconds()/60)
		s.stated = windowState{set: true, limit: windowQuota, remaining: max(windowQuota-used, 0), resetIn: time.Minute - into}
		if used > windowQuota {
			if s.full == nil {
				s.full = map[int64]bool{}
			}
			s.full[w] = true
			return "429"
		}
		return s.normal(Cheap, 1)
	},
}
