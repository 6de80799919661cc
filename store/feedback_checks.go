package store

import "github.com/throttle-go/throttle/internal/contract"

var (
	_ contract.Feedback = (*Redis)(nil)
	_ contract.Feedback = (*Memory)(nil)
)
