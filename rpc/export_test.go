package rpc

// HTTPStatus is the HTTP status the Connect protocol gives code, for the
// tests of package rpc_test.
var HTTPStatus = connectHTTPStatus
