package coordinator

import (
	"github.com/tolaria-ml/tolaria/coordinator/budget"
)

// The device-memory budget broker lives in package budget; these names
// keep the coordinator's callers working.

// Headroom is the factor a budget request must fit with (see
// budget.Headroom).
const Headroom = budget.Headroom

type (
	BrokerConfig = budget.Config
	Broker       = budget.Broker
	Ask          = budget.Ask
	Grant        = budget.Grant
	RefusedError = budget.RefusedError
	Ticket       = budget.Ticket
	Books        = budget.Books
)

// ErrBudgetRefused is wrapped by a budget the broker can never grant.
var ErrBudgetRefused = budget.ErrRefused

// NewBroker makes a broker (see budget.New).
func NewBroker(cfg BrokerConfig) (*Broker, error) { return budget.New(cfg) }
