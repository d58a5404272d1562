package rpc

import "github.com/warrenipc/warren/internal/bridgecore"

// HTTPStatus is the HTTP status the Connect protocol gives code, for the
// tests of package rpc_test.
var HTTPStatus = bridgecore.HTTPStatus
