// The target that owns the test suites' shared precompiled header (test_util.h: doctest, kiln.h
// and the internals tests reach; tests/CMakeLists.txt, KILN_TEST_PCH). An empty suite: never run.
