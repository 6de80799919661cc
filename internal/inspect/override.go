package inspect

import (
	"fmt"

	"github.com/throttle-go/throttle/internal/contract"
)

// OverrideDoc is an override of a rule's limits as the store keeps it
// (contract.Overrides), as JSON: what operator.SetLimits writes and every
// process running the rule polls.
type OverrideDoc struct {
	// Limits replace the rule's, one for one, in its order, as written
	// (without Margin).
	Limits []contract.Limit `json:"limits"`
	At     int64            `json:"at_ms"`              // when it was set, Unix ms on the setter's clock
	Until  int64            `json:"until_ms,omitempty"` // when it expires, 0: until cleared
	By     string           `json:"by"`
}

// OverrideEntry is one entry of a rule's history of overrides.
type OverrideEntry struct {
	At      int64            `json:"at_ms"`
	By      string           `json:"by"`
	Cleared bool             `json:"cleared,omitempty"`
	From    []contract.Limit `json:"from"` // the limits before: the last override's, else the rule's
	To      []contract.Limit `json:"to"`   // the limits after: the override's, or the rule's when cleared
	Until   int64            `json:"until_ms,omitempty"`
}

// Tighter returns nil when over, an override, may replace code, a rule's
// limits as written: as many limits, in the same order, each admitting no
// more than the rule's in any interval (N no larger, a window no shorter,
// a paced limit's burst no larger; paced or not, and the precision, as
// the rule's). Its error says which limit does not.
func Tighter(over, code []contract.Limit) error {
	if len(over) != len(code) {
		return fmt.Errorf("the rule has %d limits (%s): give %d, in that order", len(code), Format(code), len(code))
	}
	for i, o := range over {
		c := code[i]
		switch {
		case o.Paced != c.Paced:
			return fmt.Errorf("limit %d (%s) must be paced as the rule's %s is, or not", i+1, FormatLimit(o), FormatLimit(c))
		case o.Precision != c.Precision:
			return fmt.Errorf("limit %d (%s) must keep the precision of the rule's %s", i+1, FormatLimit(o), FormatLimit(c))
		case o.N > c.N || o.Per < c.Per || (o.Paced && o.Burst > c.Burst):
			return fmt.Errorf("limit %d (%s) would raise the rule's %s: an override may only lower N, lengthen the window or lower a burst", i+1, FormatLimit(o), FormatLimit(c))
		case o.N < 1 || o.Burst < 0 || o.Burst > o.N:
			return fmt.Errorf("limit %d (%s): N must be at least 1, a burst from 0 to N", i+1, FormatLimit(o))
		}
	}
	return nil
}

// FormatLimit writes l as the command line reads it: "100/1s",
// "100/1s/paced+9", "5000/1h/1m".
func FormatLimit(l contract.Limit) string {
	s := fmt.Sprintf("%d/%s", l.N, short(l.Per.String()))
	switch {
	case l.Paced && l.Burst > 0:
		s += fmt.Sprintf("/paced+%d", l.Burst)
	case l.Paced:
		s += "/paced"
	case l.Precision != 0:
		s += "/" + short(l.Precision.String())
	}
	return s
}

// Format writes limits separated by spaces.
func Format(ls []contract.Limit) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += " "
		}
		s += FormatLimit(l)
	}
	return s
}

// short drops the zero units of a time.Duration's text: "1h", "1m30s".
func short(s string) string {
	if len(s) > 3 && s[len(s)-3:] == "m0s" {
		s = s[:len(s)-2]
	}
	if len(s) > 3 && s[len(s)-3:] == "h0m" {
		s = s[:len(s)-2]
	}
	return s
}
