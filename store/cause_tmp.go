package store

// TEMPORARY: replaced by the store restructuring.
type Cause uint8

const (
	CauseNone Cause = iota
	CauseOrder
	CauseLimit
	CauseUpstream
	CauseLearned
)

func (r Reservation) Cause() Cause {
	switch {
	case r.Upstream:
		return CauseUpstream
	case r.Learned:
		return CauseLearned
	case r.Limit >= 0:
		return CauseLimit
	}
	return CauseNone
}
