#!/bin/sh
podwire-no-such-program --help
