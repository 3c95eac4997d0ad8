package sync

import "errors"

var (
	// ErrCursorLocked is returned by CursorStore.Lock when another
	// transaction holds the consumer's cursor row: another worker is running
	// a round for that consumer, so this round ends at once.
	ErrCursorLocked = errors.New("consumer cursor is locked by another round")

	// ErrUnknownConsumer is returned when a consumer has no cursor row: its
	// migration has not run, or the name is misspelt.
	ErrUnknownConsumer = errors.New("consumer has no cursor row (missing migration?)")

	// ErrRoundPanicked wraps a panic recovered inside a round; the round was
	// rolled back.
	ErrRoundPanicked = errors.New("consumer round panicked")

	// ErrBadPrefix is returned, and the round rolled back, when a
	// ConsumerPrefixHandler says it covered no event or more events than
	// it was given.
	ErrBadPrefix = errors.New("consumer covered an impossible prefix of the events")
)
