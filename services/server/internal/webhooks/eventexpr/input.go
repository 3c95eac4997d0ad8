package eventexpr

import (
	"encoding/json"
	"errors"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// Input is one event as expressions see it. Its data is decoded once, on
// the first evaluation that reads it, and kept: a round evaluates every
// filter of an event on one Input. An Input is not safe for concurrent use.
type Input struct {
	ev      *sync.Event
	data    map[string]any
	dataErr error
	decoded bool
}

var _ interpreter.Activation = (*Input)(nil)

// NewInput returns the input of ev, which must not change while it is used.
func NewInput(ev *sync.Event) *Input { return &Input{ev: ev} }

// ResolveName implements interpreter.Activation.
func (in *Input) ResolveName(name string) (any, bool) {
	switch name {
	case "id":
		return types.String(in.ev.ID.String()), true
	case "seq":
		return types.Int(in.ev.Seq), true
	case "type":
		return types.String(in.ev.Type), true
	case "space":
		return types.String(in.ev.Space), true
	case "actor":
		return types.String(in.ev.Actor), true
	case "occurred_at":
		return types.Timestamp{Time: in.ev.OccurredAt.UTC()}, true
	case "data":
		d, err := in.decode()
		if err != nil {
			return types.WrapErr(err), true
		}
		return d, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (*Input) Parent() interpreter.Activation { return nil }

// decode returns the event's data as a map, decoding it the first time.
func (in *Input) decode() (map[string]any, error) {
	if !in.decoded {
		in.decoded = true
		in.data = map[string]any{}
		if len(in.ev.Data) > 0 {
			in.dataErr = json.Unmarshal(in.ev.Data, &in.data)
		}
		if in.dataErr == nil && in.data == nil {
			in.dataErr = errors.New("data is null, not an object")
		}
	}
	return in.data, in.dataErr
}
