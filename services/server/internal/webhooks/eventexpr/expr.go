package eventexpr

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	gosync "sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"
)

// Bounds of an expression.
const (
	// MaxSourceBytes is the longest expression accepted, in bytes.
	MaxSourceBytes = 4096
	// MaxDepth is the deepest nesting the parser accepts.
	MaxDepth = 32
	// CostLimit is the most work one evaluation may do, in CEL's cost
	// units (about one per operation, one per list element or string
	// byte a function walks). An evaluation past it stops with an error;
	// an expression whose cheapest evaluation is past it is refused.
	CostLimit = 10_000
)

// Kind says what an expression is for, which bounds the type of its value.
type Kind int

const (
	// Filter: a bool, true for an event that is delivered.
	Filter Kind = iota
	// Transform: a map or a list, the JSON body sent for the event.
	Transform
)

func (k Kind) String() string {
	if k == Transform {
		return "transform"
	}
	return "filter"
}

// Error is why an expression was refused: where (1-based line and column)
// and what.
type Error struct {
	Line, Column int
	Message      string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Message) }

// ErrCostLimit is returned (wrapped) by an evaluation that CostLimit
// stopped.
var ErrCostLimit = errors.New("cost limit exceeded")

// Program is a compiled expression. It is safe for concurrent use.
type Program struct {
	kind Kind
	src  string
	prg  cel.Program
}

// Source is the expression the program was compiled from.
func (p *Program) Source() string { return p.src }

// env is the one environment every expression is checked in.
var env = gosync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("id", cel.StringType),
		cel.Variable("seq", cel.IntType),
		cel.Variable("type", cel.StringType),
		cel.Variable("space", cel.StringType),
		cel.Variable("actor", cel.StringType),
		cel.Variable("occurred_at", cel.TimestampType),
		cel.Variable("data", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserRecursionLimit(MaxDepth),
		cel.ParserExpressionSizeLimit(MaxSourceBytes),
	)
})

// Compile checks src as an expression of kind and returns its program. A
// refusal is an *Error.
func Compile(kind Kind, src string) (*Program, error) {
	if len(src) > MaxSourceBytes {
		return nil, &Error{Line: 1, Column: 1, Message: fmt.Sprintf("%d bytes, at most %d", len(src), MaxSourceBytes)}
	}
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, issueError(iss)
	}
	if err := checkOutput(kind, ast.OutputType()); err != nil {
		return nil, err
	}
	est, err := e.EstimateCost(ast, noEstimates{})
	if err == nil && est.Min > CostLimit {
		return nil, &Error{Line: 1, Column: 1, Message: fmt.Sprintf("its cheapest evaluation costs %d, more than the limit of %d", est.Min, CostLimit)}
	}
	// No cel.OptOptimize: it would evaluate constant parts here, at save,
	// outside the cost limit.
	prg, err := e.Program(ast, cel.CostLimit(CostLimit))
	if err != nil {
		return nil, &Error{Line: 1, Column: 1, Message: err.Error()}
	}
	return &Program{kind: kind, src: src, prg: prg}, nil
}

// issueError is the first of a compilation's issues.
func issueError(iss *cel.Issues) error {
	errs := iss.Errors()
	if len(errs) == 0 {
		return &Error{Line: 1, Column: 1, Message: iss.Err().Error()}
	}
	first := errs[0]
	return &Error{Line: max(first.Location.Line(), 1), Column: first.Location.Column() + 1, Message: first.Message}
}

// checkOutput refuses an expression whose type cannot be what kind needs.
func checkOutput(kind Kind, t *cel.Type) error {
	if t == nil || t.IsExactType(cel.DynType) {
		return nil // known only at run time
	}
	switch kind {
	case Filter:
		if t.IsExactType(cel.BoolType) {
			return nil
		}
		return &Error{Line: 1, Column: 1, Message: fmt.Sprintf("a filter must be a bool, this is a %s", t)}
	default:
		if k := t.Kind(); k == types.MapKind || k == types.ListKind {
			return nil
		}
		return &Error{Line: 1, Column: 1, Message: fmt.Sprintf("a transform must be a map or a list, this is a %s", t)}
	}
}

// noEstimates gives the static estimate nothing beyond what CEL knows, so
// the data's sizes are unknown: its minimum is what any event costs.
type noEstimates struct{}

func (noEstimates) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }

func (noEstimates) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// eval runs the program on in and maps a cost-limit stop to ErrCostLimit.
func (p *Program) eval(in *Input) (ref.Val, error) {
	v, _, err := p.prg.Eval(in)
	if err != nil {
		if strings.Contains(err.Error(), "cost limit exceeded") {
			return nil, fmt.Errorf("%s: %w", p.kind, ErrCostLimit)
		}
		return nil, fmt.Errorf("%s: %w", p.kind, err)
	}
	return v, nil
}

// Match runs a filter on an event: whether it is delivered.
func (p *Program) Match(in *Input) (bool, error) {
	v, err := p.eval(in)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("filter: the value is a %s, not a bool", v.Type())
	}
	return bool(b), nil
}

// Body runs a transform on an event and returns its value as JSON.
func (p *Program) Body(in *Input) (json.RawMessage, error) {
	v, err := p.eval(in)
	if err != nil {
		return nil, err
	}
	_, isMap := v.(traits.Mapper)
	_, isList := v.(traits.Lister)
	if !isMap && !isList {
		return nil, fmt.Errorf("transform: the value is a %s, not a map or a list", v.Type())
	}
	pv, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, fmt.Errorf("transform: the value is not JSON: %w", err)
	}
	body, err := json.Marshal(pv.(*structpb.Value).AsInterface())
	if err != nil {
		return nil, fmt.Errorf("transform: the value is not JSON: %w", err)
	}
	return body, nil
}
