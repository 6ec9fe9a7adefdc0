#!/usr/bin/python3
"""A reference Double DQN on CartPole-v1 in PyTorch, with the settings of
tolaria's rl/dqn DefaultConfig, to tell tuning from a bug: if this reaches a
mean return of 475 over 100 episodes where tolaria does not, tolaria's agent
is wrong somewhere; if neither does, the settings are.

The environment is written out here with the same classic-control dynamics
as rl/env (Euler, 12 degree and 2.4 limits, 500-step truncation, a start
state uniform in +-0.05). One environment, one training step per
environment step after learning_starts, a hard target update every
target_update steps, Huber loss, Adam without weight decay, global-norm
clipping, epsilon decaying linearly.

    /usr/bin/python3 bench/peer/dqn_cartpole.py [--steps N] [--seed S] [--lr LR]
        [--target-update N] [--batch N] [--hidden 128,128] [--eps-decay N]

Prints a line every 10k steps and, at the end, the step at which the mean of
the last 100 episodes first reached 475 (or that it did not).
"""

import argparse
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn


class CartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit = 12 * 2 * math.pi / 360
    x_limit = 2.4

    def __init__(self, rng):
        self.rng = rng
        self.reset()

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masscart + self.masspole
        polemass_length = self.masspole * self.length
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        terminated = abs(x) > self.x_limit or abs(theta) > self.theta_limit
        truncated = not terminated and self.steps >= 500
        return self.state.astype(np.float32), 1.0, terminated, truncated


def net(hidden):
    layers, width = [], 4
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 2))
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--buffer", type=int, default=50000)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--target-update", type=int, default=500)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--eps-end", type=float, default=0.01)
    p.add_argument("--eps-decay", type=int, default=20000)
    p.add_argument("--clip", type=float, default=10.0)
    p.add_argument("--hidden", default="128,128")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(1)
    hidden = [int(h) for h in a.hidden.split(",")]
    online, target = net(hidden), net(hidden)
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=a.lr)
    obs_b = np.zeros((a.buffer, 4), np.float32)
    next_b = np.zeros((a.buffer, 4), np.float32)
    act_b = np.zeros(a.buffer, np.int64)
    rew_b = np.zeros(a.buffer, np.float32)
    live_b = np.zeros(a.buffer, np.float32)
    env = CartPole(rng)
    obs = env.reset()
    returns, ret, solved, n, updates = [], 0.0, -1, 0, 0
    start = time.time()
    for t in range(1, a.steps + 1):
        eps = max(a.eps_end, 1.0 - (1.0 - a.eps_end) * (t - 1) / a.eps_decay)
        if rng.random() < eps:
            action = int(rng.integers(2))
        else:
            with torch.no_grad():
                action = int(online(torch.from_numpy(obs)).argmax())
        nxt, r, term, trunc = env.step(action)
        i = (t - 1) % a.buffer
        obs_b[i], next_b[i], act_b[i], rew_b[i], live_b[i] = obs, nxt, action, r, 0.0 if term else 1.0
        n = min(n + 1, a.buffer)
        ret += r
        obs = nxt
        if term or trunc:
            returns.append(ret)
            ret, obs = 0.0, env.reset()
            if solved < 0 and len(returns) >= 100 and np.mean(returns[-100:]) >= 475:
                solved = t
        if t > a.learning_starts:
            idx = rng.integers(n, size=a.batch)
            o, nx = torch.from_numpy(obs_b[idx]), torch.from_numpy(next_b[idx])
            with torch.no_grad():
                best = online(nx).argmax(1, keepdim=True)
                y = torch.from_numpy(rew_b[idx]) + a.gamma * torch.from_numpy(live_b[idx]) * target(nx).gather(1, best).squeeze(1)
            q = online(o).gather(1, torch.from_numpy(act_b[idx]).unsqueeze(1)).squeeze(1)
            loss = nn.functional.smooth_l1_loss(q, y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(online.parameters(), a.clip)
            opt.step()
            updates += 1
            if updates % a.target_update == 0:
                target.load_state_dict(online.state_dict())
        if t % 10000 == 0:
            mean = np.mean(returns[-100:]) if returns else 0.0
            print(f"step {t}: {len(returns)} episodes, last-100 mean {mean:.1f}, {time.time() - start:.0f}s", flush=True)
        if solved > 0:
            break
    mean = np.mean(returns[-100:]) if returns else 0.0
    print(f"seed {a.seed}: solved at step {solved} (-1: not within {a.steps}); last-100 mean {mean:.1f}")


if __name__ == "__main__":
    main()
