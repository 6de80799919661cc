package memstore

import (
	"math"

	"github.com/throttle-go/throttle/internal/contract"
)

// noExpiry is the expiry of Memory state that has none: only state written
// from outside, by the store's own tests, as another program's RPUSH or SET
// writes a Redis key without a TTL.
const noExpiry = math.MaxInt64

// repairFar is the Memory store's twin of a reservation that meets a time
// past the horizon, and of the repair that follows (repair.lua): when key's
// last entry, its paced time (the request's, or a learned pace's), or the
// last entry of a part lies past the horizon, every entry and paced time
// past it goes, and state without an expiry gets one. The log is ordered,
// so its last entry is its latest. m.mu is held.
func (m *Memory) repairFar(key string, req *contract.Request, now, maxPer int64) {
	h := now + req.Horizon(maxPer)
	far := m.farLog(key, now, h)
	if ps := m.paces[key]; ps != nil && ps.expires > now {
		hp := h
		if req.PacedLimit() < 0 {
			f := m.liveFeedback(key, now)
			pt, pb, ok := int64(0), int64(0), false
			if f != nil {
				pt, pb, ok = f.pace(now)
			}
			if !ok {
				hp = noExpiry // no pace reads it
			} else {
				base := now + contract.MicrosDown(req.MaxWait) + contract.Micros(contract.MaxAllowance)
				hp = max(h, base+contract.PaceSpan(pt, max(pb, int64(req.Cost)-1), int64(req.Cost)))
			}
		}
		far = far || ps.tat > hp
	}
	for i := range req.Also {
		far = far || m.farLog(req.Also[i].Key, now, now+req.PartHorizon(&req.Also[i]))
	}
	if !far {
		return
	}
	m.dropAfter(key, now, h)
	if ps := m.paces[key]; ps != nil && ps.tat > h {
		delete(m.paces, key)
	} else if ps != nil && ps.expires == noExpiry {
		ps.expires = now + 2*(h-now)
	}
	for i := range req.Also {
		m.dropAfter(req.Also[i].Key, now, now+req.PartHorizon(&req.Also[i]))
	}
}

// farLog reports whether key's log holds a live entry later than h.
func (m *Memory) farLog(key string, now, h int64) bool {
	lg := m.logs[key]
	return lg != nil && lg.expires > now && len(lg.times) > lg.head && lg.times[len(lg.times)-1] > h
}

// dropAfter removes the entries of key's log later than h, and gives a log
// without an expiry one (repair.lua's fix and expiring).
func (m *Memory) dropAfter(key string, now, h int64) {
	lg := m.logs[key]
	if lg == nil {
		return
	}
	n := len(lg.times)
	for n > lg.head && lg.times[n-1] > h {
		n--
	}
	lg.times = lg.times[:n]
	if lg.expires == noExpiry {
		lg.expires = now + 2*(h-now)
	}
}
