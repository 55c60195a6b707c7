package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Counter replicas share (rate_limits.store: redis). Every
// Take is one round trip: one Lua script (EVALSHA) that reads the cells'
// theoretical arrival times, decides with the same GCRA as Memory, and
// writes them all or none, atomically (Redis runs a script alone). Each
// cell is one key holding its tat in microseconds, expiring when its
// window is empty, so an idle tenant costs Redis nothing.
//
// Error bound: the script decides with the time the replica sends
// (its injected clock), so a replica whose clock runs s ahead of the
// others admits up to s × limit / 1m units more in a window (NTP keeps s
// to milliseconds: 10 ms of skew on a 600 rpm limit is 0.1 request), and
// one behind admits fewer. Intervals are rounded up to the microsecond
// (a 1e9 tpm limit is 0.06 µs per token: a request of 1 token counts as
// up to 17). A settle that cannot reach Redis is lost: the window errs by
// that request's estimate for one window; so does a Take whose answer
// timed out after the script ran (its units stay taken, though the
// caller's on_store_error served the request unsettled or refused it).
// Nothing else is approximate.
type Redis struct {
	client redis.UniversalClient
	prefix string
}

var _ Counter = (*Redis)(nil)

// RedisOptions are the client's settings for admissions: short timeouts
// and no retries, so a Redis that is gone costs a request its
// Limiter's CallTimeout at most, and on_store_error decides.
func RedisOptions(url string) (*redis.Options, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("rate_limits: the Redis URL is not valid (redis://host:port/db): %w", err)
	}
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.MaxRetries = -1 // no retries: the caller's bound holds
	o.ContextTimeoutEnabled = true
	return o, nil
}

// NewRedis counts in the Redis client c, under keys starting with prefix
// (default "hopgate:rl:").
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	if prefix == "" {
		prefix = "hopgate:rl:"
	}
	return &Redis{client: c, prefix: prefix}
}

// takeScript: KEYS are the cells; ARGV[1] is now (µs), then per cell its
// cost and limit. Returns {allowed (1|0), the cells' tats before (µs)}.
// A cost above the limit never fits; the interval is rounded up to 1 µs.
var takeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local W = 60000000
local tats = redis.call('MGET', unpack(KEYS))
local allowed = 1
local nexts = {}
local out = {0}
for i = 1, #KEYS do
  local cost = tonumber(ARGV[2*i])
  local limit = tonumber(ARGV[2*i+1])
  local tat = tonumber(tats[i]) or 0
  out[i+1] = tat -- an integer reply
  local nxt = math.max(tat, now) + math.ceil(cost * W / limit)
  if cost > limit or nxt - now > W then allowed = 0 end
  nexts[i] = nxt
end
if allowed == 1 then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], string.format('%d', nexts[i]), 'PX', math.ceil((nexts[i] - now) / 1000) + 1)
  end
end
out[1] = allowed
return out
`)

// adjustScript: KEYS[1] is the cell; ARGV now (µs), delta, limit.
var adjustScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]))
local delta = tonumber(ARGV[2])
if not tat and delta <= 0 then return 0 end
local W = 60000000
local nxt = math.max(tat or 0, now) + math.ceil(delta * W / tonumber(ARGV[3]))
if nxt <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', math.ceil((nxt - now) / 1000) + 1)
end
return 1
`)

// Take admits cells' units all or none, in one round trip.
func (r *Redis) Take(ctx context.Context, now time.Time, cells []Cell) (Verdict, error) {
	var keys [MaxCells]string
	args := make([]any, 0, 1+2*len(cells))
	us := now.UnixMicro()
	args = append(args, us)
	for i, c := range cells {
		keys[i] = r.key(c)
		args = append(args, min(max(c.N, 0), c.Limit+1), c.Limit)
	}
	res, err := takeScript.Run(ctx, r.client, keys[:len(cells)], args...).Slice()
	if err != nil {
		return Verdict{}, err
	}
	if len(res) != 1+len(cells) {
		return Verdict{}, errors.New("rate_limits: the Redis script answered " + strconv.Itoa(len(res)) + " values")
	}
	allowed, _ := res[0].(int64)
	// The states for the headers, from the tats the script read, with the
	// same arithmetic (the script's verdict is the one that counts).
	v := Verdict{Allowed: allowed == 1}
	var tats [MaxCells]int64
	var fits [MaxCells]bool
	for i, c := range cells {
		tat, _ := res[i+1].(int64)
		tats[i] = tat * 1000
		_, fits[i], v.States[i] = take(tats[i], us*1000, c.N, c.Limit)
	}
	if v.Allowed {
		return v, nil
	}
	if !v.deny(cells, fits[:len(cells)], tats[:len(cells)], us*1000) {
		// Rounding put the verdicts apart: the script refused, say the
		// tightest cell.
		for i := range cells {
			if v.States[i].Remaining < v.States[v.Denied].Remaining {
				v.Denied = i
			}
		}
		v.States[v.Denied].RetryAfter = time.Millisecond
	}
	return v, nil
}

// Adjust moves one cell by delta units.
func (r *Redis) Adjust(ctx context.Context, now time.Time, c Cell, delta int64) error {
	d := min(max(delta, -16*(c.Limit+1)), 16*(c.Limit+1))
	return adjustScript.Run(ctx, r.client, []string{r.key(c)}, now.UnixMicro(), d, c.Limit).Err()
}

// key names a cell. The tenant is the hash tag: a tenant's cells share
// a Redis Cluster slot, so one script may take them all.
func (r *Redis) key(c Cell) string {
	return r.prefix + "{" + c.Tenant + "}:" + strconv.Itoa(len(c.Model)) + ":" + c.Model + ":" + c.Kind.String()
}
