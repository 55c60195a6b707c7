// Package money is hopgate's arithmetic of prices and charges (DESIGN §9):
// decimal amounts read exactly into integer micro-units of a currency
// (never through a float), written back as decimals, and the charge of a
// request from a list price per 1M tokens and a token usage.
//
// It owns the rounding rules (one place: a charge is rounded up to the
// next micro-unit, so a wallet is never charged less than the price says)
// and the bounds that keep every product inside int64. It must not know
// about tenants, stores or requests.
package money
