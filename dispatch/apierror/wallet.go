package apierror

import (
	"net/http"
	"time"
)

// Codes of tenants' wallets (DESIGN §9; docs/errors.md).
const (
	// CodeInsufficientBalance: the tenant's wallet cannot cover the
	// request's reservation. Final: no retry refills a wallet.
	CodeInsufficientBalance = "insufficient_balance"
	// CodeWalletUnavailable: the wallet store is down and the request
	// would be charged; nothing was sent upstream.
	CodeWalletUnavailable = "wallet_unavailable"
)

// InsufficientBalance is the 402 of a request its tenant cannot pay for.
func InsufficientBalance(msg string) *Error {
	return &Error{Status: http.StatusPaymentRequired, Type: "insufficient_quota", Code: CodeInsufficientBalance, Message: msg}
}

// WalletUnavailable is the 503 of a charged request while the store is
// down (billing.on_store_error: fail_closed).
func WalletUnavailable(msg string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: CodeWalletUnavailable, Message: msg, RetryAfter: retryAfter}
}
