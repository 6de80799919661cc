package contract

// Horizon is how far past now, in microseconds, a time that req's key
// holds may lie (the scripts' implausible, prelude.lua): req's MaxWait (a
// slot further is refused), MaxAllowance (an entry goes at most that far
// past its slot) and the longer of its longest window, maxPer, and the
// spacings its paced time may run ahead of its slot. No reservation of a
// request like req writes a later time: one is a wrong state, repaired.
func (r *Request) Horizon(maxPer int64) int64 {
	span := maxPer
	if p := r.PacedLimit(); p >= 0 {
		span = max(span, PaceSpan(r.Limits[p].Interval(), int64(r.Limits[p].Burst), int64(r.Cost)))
	}
	return MicrosDown(r.MaxWait) + Micros(MaxAllowance) + span
}

// PaceSpan is how far a paced time of spacing t and burst b may run ahead
// of the slot of a request of cost c: (b + c + 1) spacings (pace.lua).
func PaceSpan(t, b, c int64) int64 { return (b + c + 1) * t }

// PartHorizon is horizon for a part of req (Request.Also): its own windows.
func (r *Request) PartHorizon(p *Part) int64 {
	var maxPer int64
	for _, l := range p.Limits {
		maxPer = max(maxPer, Micros(l.Per))
	}
	return MicrosDown(r.MaxWait) + Micros(MaxAllowance) + maxPer
}
