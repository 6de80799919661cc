package memstore

import "github.com/throttle-go/throttle/internal/contract"

// memAlso is a part's log in the Memory store during one Reserve, or a
// unit's (units_memory.go).
type memAlso struct {
	lg   *memLog
	maxW int64
	unit *unitCall
}

// alsoSlot is also.lua's also_slot: the parts' logs, trimmed, once s is
// raised to what each allows (its limits, then its order); m.mu is held.
func (m *Memory) alsoSlot(key string, req *contract.Request, now int64, s *slot) []memAlso {
	parts := make([]memAlso, len(req.Also))
	for i, p := range req.Also {
		if p.Unit != "" {
			u := m.unitSlot(key, &req.Also[i], i+1, now, s)
			parts[i] = memAlso{unit: u}
			if last := u.u.last(); req.Allowance == 0 && last > s.at {
				*s = slot{last, 0, 0, contract.CauseOrder}
			}
			continue
		}
		var maxW int64
		for _, l := range p.Limits {
			maxW = max(maxW, contract.Micros(l.Per))
		}
		lg := m.openLog(p.Key, now, maxW, true)
		parts[i] = memAlso{lg: lg, maxW: maxW}
		lg.slot(s, p.Limits, req.Cost, i+1)
		if last := lg.last(); req.Allowance == 0 && last > s.at {
			*s = slot{last, 0, 0, contract.CauseOrder}
		}
	}
	return parts
}

// alsoRecord is also.lua's also_record: the units recorded at the latest of
// rec and every part's last entry, which it returns; m.mu is held.
func alsoRecord(parts []memAlso, cost int, rec int64) int64 {
	for _, p := range parts {
		if p.unit != nil {
			rec = max(rec, p.unit.u.last())
		} else {
			rec = max(rec, p.lg.last())
		}
	}
	for _, p := range parts {
		if p.unit != nil {
			p.unit.record(rec)
		} else {
			p.lg.record(rec, cost, p.maxW)
		}
	}
	return rec
}

// cancelFrom removes up to cost entries equal to entry from lg: the log is
// ordered, so they are one run, [lo, hi).
func cancelFrom(lg *memLog, entry int64, cost int) {
	hi := len(lg.times)
	for hi > lg.head && lg.times[hi-1] > entry {
		hi--
	}
	lo := hi
	for lo > lg.head && lg.times[lo-1] == entry && hi-lo < cost {
		lo--
	}
	lg.times = append(lg.times[:lo], lg.times[hi:]...)
}
