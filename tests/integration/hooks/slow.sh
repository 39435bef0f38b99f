#!/bin/sh
#  A hook that outlives any reasonable timeout.
sleep 30
