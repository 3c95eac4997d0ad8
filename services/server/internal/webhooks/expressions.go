package webhooks

import (
	"fmt"

	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
)

// validateExpressions compiles a subscription's filter and transform ("":
// none) and refuses one that does not compile, naming the field, the
// position and the reason.
func validateExpressions(filter, transform string) error {
	if err := validateExpression("filter", eventexpr.Filter, filter); err != nil {
		return err
	}
	return validateExpression("transform", eventexpr.Transform, transform)
}

func validateExpression(field string, kind eventexpr.Kind, src string) error {
	if src == "" {
		return nil
	}
	if _, err := eventexpr.Compile(kind, src); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
	return nil
}
