package peer

// VerifiedLeaf is verifiedLeaf, for the tests of package peer_test.
var VerifiedLeaf = verifiedLeaf
